import { execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  CLI,
  type CliResult,
  cordon,
  cordonBytes,
  sandboxContainersOf,
  waitFor,
} from './run-cli.js'

/**
 * Runs `cordon shell` with a real pseudo-terminal as its stdin and stdout,
 * as a person at a terminal does: util-linux `script` makes the terminal and
 * exits with the program's status. Its own stdin stays open (and empty)
 * until it ends, since `script` passes an end of input on to the terminal.
 */
function shellOnTerminal(
  args: readonly string[],
  onShown: (shown: string) => void = () => {},
): Promise<CliResult> {
  const quoted = [process.execPath, CLI, 'shell', ...args]
    .map((word) => `'${word.replaceAll("'", "'\\''")}'`)
    .join(' ')
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', quoted, '/dev/null'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
      onShown(stdout)
    })
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** What cordon says when the sandbox dies under its program (killed from outside here). */
const SANDBOX_LOST =
  'cordon: the sandbox ended while its program ran (lost): its container, VM or agent went away, killed from outside or with its engine\n'

describe('cordon shell', () => {
  beforeAll(async () => {
    const prepared = await cordon(['prepare'])
    if (prepared.code !== 0) throw new Error(`cordon prepare failed: ${prepared.stderr}`)
  }, 180_000)

  it("on a terminal, shows a program's output and exits with its status, however soon it ends", async () => {
    const result = await shellOnTerminal([
      '--',
      'sh',
      '-c',
      'test -t 0 && echo on-a-terminal; exit 5',
    ])
    expect(result.stdout.replaceAll('\r', '')).toContain('on-a-terminal\n')
    expect(result.code).toBe(5)
  })

  it('with stdin from a pipe, runs the program without a terminal, reading stdin to its end, and exits with its status', async () => {
    const script = 'test -t 0 || echo no-terminal\necho "$((6 * 7))"\necho err >&2\nexit 3\n'
    const result = await cordon(['shell'], {}, script)
    expect(result).toEqual({ code: 3, stdout: 'no-terminal\n42\n', stderr: 'err\n' })
    // A shell whose input ends without `exit` ends there too.
    expect(await cordon(['shell'], {}, 'echo piped\n')).toEqual({
      code: 0,
      stdout: 'piped\n',
      stderr: '',
    })
    // A named program reads the whole of stdin.
    const counted = await cordon(['shell', '--', 'wc', '-c'], {}, 'x'.repeat(200_000))
    expect(counted).toMatchObject({ code: 0, stdout: '200000\n' })
  }, 60_000)

  it('with stdin from a pipe, passes binary input and output through byte for byte', async () => {
    const input = randomBytes(3 * 1024 * 1024 + 5)
    const echoed = await cordonBytes(['shell', '--', 'cat'], input)
    expect(echoed.stderr.toString()).toBe('')
    expect(echoed.code).toBe(0)
    expect(echoed.stdout.equals(input)).toBe(true)
  }, 60_000)

  it('says why when the sandbox is killed under the program, with stdin from a pipe or on a terminal', async () => {
    // Without a terminal: cordon cannot know how the program ended (125).
    const child = spawn(
      process.execPath,
      [CLI, 'shell', '--', 'sh', '-c', 'echo started; exec sleep 60'],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    )
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve))
    // Killed once the program runs (the container exists from the start of create).
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()))
    const container = await waitFor('the sandbox', () => sandboxContainersOf(child.pid!)[0])
    execFileSync('docker', ['kill', container])
    expect(await exited).toBe(125)
    expect(stderr).toBe(SANDBOX_LOST)
    child.stdin.end()

    // On a terminal: the program's status as the engine reports it (killed: 137).
    let killed = false
    const onTerminal = await shellOnTerminal(
      ['--', 'sh', '-c', 'echo "in $(hostname)"; exec sleep 60'],
      (shown) => {
        const host = /in ([0-9a-f]{12})/.exec(shown)?.[1]
        if (host && !killed) {
          killed = true
          execFileSync('docker', ['kill', host])
        }
      },
    )
    expect(killed).toBe(true)
    expect(onTerminal.code).toBe(137)
    expect(onTerminal.stdout.replaceAll('\r', '')).toContain(SANDBOX_LOST)
  }, 90_000)
})
