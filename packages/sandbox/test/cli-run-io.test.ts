import type { ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { beforeAll, describe, expect, it } from 'vitest'
import { cordon, cordonBytes, sandboxContainersOf, spawnCordon, waitFor } from './run-cli.js'

/** The one sandbox container `child` made, once the engine has it. */
function sandboxOf(child: ChildProcess): Promise<string> {
  return waitFor('the sandbox container', () => sandboxContainersOf(child.pid!)[0])
}

describe('cordon run: bytes, stdin, a reader that is slow or goes away, signals', () => {
  beforeAll(async () => {
    const prepared = await cordon(['prepare'])
    if (prepared.code !== 0) throw new Error(`cordon prepare failed: ${prepared.stderr}`)
  }, 180_000)

  it('passes binary output through byte for byte when stdout and stderr are not terminals', async () => {
    const result = await cordonBytes([
      'run',
      '--',
      'sh',
      '-c',
      'printf "\\377\\376\\000\\001\\033[2J\\r"; printf "\\300\\200\\351" >&2',
    ])
    expect(result.code).toBe(0)
    expect([...result.stdout]).toEqual([0xff, 0xfe, 0x00, 0x01, 0x1b, 0x5b, 0x32, 0x4a, 0x0d])
    expect([...result.stderr]).toEqual([0xc0, 0x80, 0xe9])
  })

  it('takes a repeatable flag more than once, and a switch twice', async () => {
    const result = await cordon([
      'run',
      '--env',
      'A=1',
      '--env',
      'B=2',
      '--raw',
      '--raw',
      '--',
      'sh',
      '-c',
      'echo "$A$B"',
    ])
    expect(result).toEqual({ code: 0, stdout: '12\n', stderr: '' })
  })

  it('feeds its stdin to the command and passes the end of it on', async () => {
    const hello = await cordon(['run', '--', 'cat'], {}, 'hello\n')
    expect(hello).toEqual({ code: 0, stdout: 'hello\n', stderr: '' })
    // Binary input, larger than any one chunk, comes back as it went in.
    const input = randomBytes(3 * 1024 * 1024 + 17)
    const echoed = await cordonBytes(['run', '--', 'cat'], input)
    expect(echoed.stderr.toString()).toBe('')
    expect(echoed.code).toBe(0)
    expect(echoed.stdout.equals(input)).toBe(true)
    // A command that reads to the end of its input ends when it does.
    const counted = await cordon(['run', '--', 'wc', '-c'], {}, 'x'.repeat(200_000))
    expect(counted).toMatchObject({ code: 0, stdout: '200000\n' })
    // An empty stdin is an end at once; a command that stops reading early is no error.
    expect(await cordon(['run', '--', 'cat'])).toEqual({ code: 0, stdout: '', stderr: '' })
    const head = await cordon(['run', '--', 'head', '-n', '1'], {}, 'first\n'.repeat(100_000))
    expect(head).toEqual({ code: 0, stdout: 'first\n', stderr: '' })
  }, 90_000)

  it('stops the command, removes the sandbox and exits 141 when its stdout is closed early', async () => {
    const child = spawnCordon(['run', '--', 'sh', '-c', 'head -c 30000000 /dev/zero'])
    // Like `| head -c 10`: take the first piece, then go away.
    await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()))
    child.stdout!.destroy()
    expect(await child.exited).toBe(141)
    // As a program a closed pipe ended: nothing said, and no crash.
    expect(child.stderrText()).toBe('')
    expect(sandboxContainersOf(child.pid!)).toEqual([])
  }, 60_000)

  it("holds the command while nobody reads its output, instead of keeping the output in cordon's memory", async () => {
    // 20 MB is far more than the pipes and windows between hold, so the
    // command can only finish writing once the test reads.
    const child = spawnCordon([
      'run',
      '--timeout',
      '120000',
      '--',
      'sh',
      '-c',
      'head -c 20000000 /dev/zero; echo finished >&2',
    ])
    child.stdout!.pause()
    await sandboxOf(child)
    await new Promise((resolve) => setTimeout(resolve, 6000))
    expect(child.stderrText()).toBe('')
    let bytes = 0
    child.stdout!.on('data', (chunk: Buffer) => {
      bytes += chunk.length
    })
    child.stdout!.resume()
    expect(await child.exited).toBe(0)
    expect(bytes).toBe(20_000_000)
    expect(child.stderrText()).toBe('finished\n')
  }, 120_000)

  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
  ] as const)(
    'on %s kills the command, removes the sandbox and exits %i',
    async (signal, code) => {
      const child = spawnCordon(['run', '--', 'sh', '-c', 'echo started; exec sleep 60'])
      await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()))
      expect(sandboxContainersOf(child.pid!)).toHaveLength(1)
      child.kill(signal)
      expect(await child.exited).toBe(code)
      expect(child.stderrText()).toBe(
        "cordon: interrupted; the command's process tree was killed\n",
      )
      expect(sandboxContainersOf(child.pid!)).toEqual([])
    },
    90_000,
  )
})
