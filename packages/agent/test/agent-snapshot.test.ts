/**
 * A startup snapshot of the agent's loader, made after a run through Node's
 * own modules (snapshot-warm-up.ts says why: under gVisor each compile in a
 * sandbox's first second costs system calls): the agent starts from it,
 * loading its program from the code cache as it does as a script, and the
 * snapshot holds nothing of the host it was made on.
 */
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { copyFile, mkdtemp, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeAgentCodeCache, makeAgentSnapshot } from '../src/sandbox/index.js'
import {
  LAUNCHER_PROGRAM,
  AGENT_LOADER as LOADER,
  AGENT_CJS_PROGRAM as PROGRAM,
} from './agent-harness.js'
import { startStdioAgent } from './stdio-agent.js'

const run = promisify(execFile)

let dir: string
/** As a guest holds them: `<dir>/agent.cjs`, `<dir>/agent-loader.cjs` and `<dir>/agent.blob`. */
let program: string
let loader: string
let blob: string
/** Set in the environment of this process while the snapshot is made. */
const hostSecret = randomBytes(24).toString('hex')

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cordon-snapshot-test-'))
  program = join(dir, 'agent.cjs')
  loader = join(dir, 'agent-loader.cjs')
  blob = join(dir, 'agent.blob')
  await copyFile(PROGRAM, program)
  await copyFile(LOADER, loader)
  process.env.CORDON_TEST_HOST_SECRET = hostSecret
  try {
    await makeAgentSnapshot({ out: blob, loader, program })
  } finally {
    delete process.env.CORDON_TEST_HOST_SECRET
  }
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

/** `node --snapshot-blob <blob> <program> <argument>`'s output. */
async function snapshotSays(argument: string): Promise<string> {
  return (await run(process.execPath, ['--snapshot-blob', blob, program, argument])).stdout.trim()
}

describe("the agent's startup snapshot", () => {
  it('the agent starts from it, loads its program from the code cache made from it, and serves commands', async () => {
    await makeAgentCodeCache({
      out: `${program}.cache`,
      program,
      snapshot: blob,
      launcher: LAUNCHER_PROGRAM,
    })
    const started = await startStdioAgent(['--snapshot-blob', blob, program], dir)
    expect(started.codeCache).toBe('used')
    expect(started.exitCode).toBe(0)
    expect(await snapshotSays('--startup-snapshot')).toBe('yes')
    expect(await snapshotSays('--code-cache')).toBe('used')
    // Through the loader as a script, it says it did not start from one.
    expect((await run(process.execPath, [loader, program, '--startup-snapshot'])).stdout).toBe(
      'no\n',
    )
  })

  it('Node refuses it under other V8 flags, and takes it with Node options such as --v8-pool-size', async () => {
    const refused = await run(process.execPath, [
      '--no-opt',
      '--snapshot-blob',
      blob,
      program,
      '--version',
    ]).catch((error: { code?: number; stderr?: string }) => error)
    expect(refused).toMatchObject({ code: expect.any(Number) })
    expect((refused as { stderr: string }).stderr).toMatch(/snapshot/i)
    const taken = await run(process.execPath, [
      '--v8-pool-size=1',
      '--snapshot-blob',
      blob,
      program,
      '--startup-snapshot',
    ])
    expect(taken.stdout).toBe('yes\n')
  })

  it('the program sees its own arguments, as it does started directly', async () => {
    const direct = (await run(process.execPath, [program, '--version'])).stdout.trim()
    expect(await snapshotSays('--version')).toBe(direct)
  })

  it('holds nothing of the environment of the process that made it, nor where the loader and the output lie', async () => {
    const bytes = readFileSync(blob)
    expect(bytes.byteLength).toBeGreaterThan(1024 * 1024)
    expect(bytes.includes(hostSecret)).toBe(false)
    expect(bytes.includes('CORDON_TEST_HOST_SECRET')).toBe(false)
    if (process.env.HOME) expect(bytes.includes(`HOME=${process.env.HOME}`)).toBe(false)
    // The loader was copied from `dir` and the snapshot written there: neither path is in it.
    expect(bytes.includes(dir)).toBe(false)
  })

  it('makeAgentSnapshot fails, writing nothing, when the build fails', async () => {
    const out = join(dir, 'never.blob')
    // One left there before is not taken for this one's.
    await writeFile(out, 'an older snapshot')
    const broken = join(dir, 'broken-loader.cjs')
    await writeFile(broken, 'throw new Error("this loader is broken")\n')
    await expect(makeAgentSnapshot({ out, loader: broken, program })).rejects.toThrow(
      /building the agent's snapshot failed: .*this loader is broken/s,
    )
    await expect(stat(out)).rejects.toThrow()
  })

  it('makeAgentSnapshot fails, keeping nothing, when the snapshot it built does not start the program', async () => {
    const out = join(dir, 'unstartable.blob')
    await expect(
      makeAgentSnapshot({ out, loader, program: join(dir, 'missing.cjs') }),
    ).rejects.toThrow(/the agent's snapshot does not start/)
    await expect(stat(out)).rejects.toThrow()
  })
})
