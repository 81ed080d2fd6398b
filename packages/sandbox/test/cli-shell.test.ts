import { spawn } from 'node:child_process'
import { beforeAll, describe, expect, it } from 'vitest'
import { CLI, type CliResult, cordon } from './run-cli.js'

/**
 * Runs `cordon shell` with a real pseudo-terminal as its stdin and stdout,
 * as a person at a terminal does: util-linux `script` makes the terminal and
 * exits with the program's status. Its own stdin stays open (and empty)
 * until it ends, since `script` passes an end of input on to the terminal.
 */
function shellOnTerminal(args: readonly string[]): Promise<CliResult> {
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
    })
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

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
})
