/**
 * The agent's loader starts the CommonJS program from a V8 code cache made
 * by a warm-up (code-cache-loader.ts says why: under gVisor each compile
 * V8 makes in a sandbox's first second costs system calls), and from source
 * when there is none or V8 refuses it.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { chmod, copyFile, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Script } from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeAgentCodeCache } from '../src/sandbox/index.js'
import {
  LAUNCHER_PROGRAM,
  AGENT_LOADER as LOADER,
  AGENT_CJS_PROGRAM as PROGRAM,
} from './agent-harness.js'
import { startStdioAgent } from './stdio-agent.js'

const run = promisify(execFile)

let dir: string
/** The program copied with its loader, as a guest holds them: `<dir>/agent.cjs` and `<dir>/agent-loader.cjs`. */
let program: string
let loader: string

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cordon-code-cache-test-'))
  program = join(dir, 'agent.cjs')
  loader = join(dir, 'agent-loader.cjs')
  await copyFile(PROGRAM, program)
  await copyFile(LOADER, loader)
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

/** `node <loader> <program> <argument>`'s output. */
async function loaderSays(argument: string): Promise<string> {
  return (await run(process.execPath, [loader, program, argument])).stdout.trim()
}

/** The loader started as a stdio agent (as a container's entry starts it); its health and a command. */
function startThroughLoader() {
  return startStdioAgent([loader, program], dir)
}

describe("the agent's code cache", () => {
  it('makeAgentCodeCache warms the agent up (through cordon-launcher) and writes a cache with more than a cold compile holds', async () => {
    const cache = join(dir, 'agent.cjs.cache')
    await makeAgentCodeCache({ out: cache, program, loader, launcher: LAUNCHER_PROGRAM })
    const source = readFileSync(program, 'utf8').replace(/^#!/, '//')
    // What compiling alone would hold: the program's top level, none of what it runs.
    const cold = new Script(
      `(function (exports, require, module, __filename, __dirname) { ${source}\n});`,
    )
    const coldBytes = cold.createCachedData().byteLength
    expect((await stat(cache)).size).toBeGreaterThan(coldBytes * 2)
  })

  it('an agent started through its loader uses the cache, says so in its health answer, and serves commands', async () => {
    const started = await startThroughLoader()
    expect(started.codeCache).toBe('used')
    expect(started.exitCode).toBe(0)
    expect(await loaderSays('--code-cache')).toBe('used')
  })

  it('the program sees its own arguments through the loader', async () => {
    const direct = (await run(process.execPath, [program, '--version'])).stdout.trim()
    expect(await loaderSays('--version')).toBe(direct)
    // Started without its loader, it says so.
    expect((await run(process.execPath, [program, '--code-cache'])).stdout.trim()).toBe('no loader')
  })

  it('a cache V8 refuses (made for another program) is said in the log, and the program is compiled from source', async () => {
    await writeFile(
      join(dir, 'agent.cjs.cache'),
      new Script('"another program"').createCachedData(),
    )
    const started = await startThroughLoader()
    expect(started.codeCache).toBe('rejected')
    expect(started.exitCode).toBe(0)
    expect(started.log).toContain('agent.cjs.cache was made by another Node or with other V8 flags')
  })

  it('without a cache beside it the program is compiled from source', async () => {
    await rm(join(dir, 'agent.cjs.cache'))
    const started = await startThroughLoader()
    expect(started.codeCache).toBe('none')
    expect(started.exitCode).toBe(0)
    expect(await loaderSays('--code-cache')).toBe('none')
  })

  it('makeAgentCodeCache still makes a cache where its temporary directory is too long a path for a unix socket', async () => {
    const long = join(dir, 'x'.repeat(60), 'y'.repeat(60))
    await mkdir(long, { recursive: true })
    const tmpdirBefore = process.env.TMPDIR
    process.env.TMPDIR = long
    try {
      const out = join(dir, 'long.cache')
      await makeAgentCodeCache({ out, program, loader })
      expect((await stat(out)).size).toBeGreaterThan(0)
    } finally {
      if (tmpdirBefore === undefined) delete process.env.TMPDIR
      else process.env.TMPDIR = tmpdirBefore
    }
  })

  it('makeAgentCodeCache runs a launcher that is not executable where it lies (as a registry install leaves it) from a copy', async () => {
    const packed = join(dir, 'packed-launcher')
    await copyFile(LAUNCHER_PROGRAM, packed)
    await chmod(packed, 0o644)
    const out = join(dir, 'packed.cache')
    await makeAgentCodeCache({ out, program, loader, launcher: packed })
    expect((await stat(out)).size).toBeGreaterThan(0)
  })

  it('makeAgentCodeCache fails, writing nothing, when the agent cannot start', async () => {
    const out = join(dir, 'never.cache')
    // One left there before is not taken for this one's.
    await writeFile(out, 'an older cache')
    await expect(
      makeAgentCodeCache({ out, program: join(dir, 'missing.cjs'), loader }),
    ).rejects.toThrow(/ended/)
    await expect(stat(out)).rejects.toThrow()
  })
})
