import {
  SandboxConfigValidationError,
  type SandboxOutputBytes,
  type SandboxOutputChunk,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/** Lists the processes in a sandbox whose command line contains `marker`. */
async function processesMatching(sandboxes: SandboxesUnderTest, marker: string): Promise<string[]> {
  const ps = await sandboxes.sandbox.exec('ps', ['-o', 'pid,args'])
  return ps.stdout.split('\n').filter((line) => line.includes(marker) && !line.includes('ps -o'))
}

/**
 * A sleep duration no other process on the machine has: a backend without
 * isolation lists the whole host's processes, other tests' `sleep`s among
 * them. Callers append one digit, so `sleep <n>0` and `sleep <n>1` both
 * match `sleep <n>`.
 */
function uniqueSleep(): string {
  return String(100_000 + Math.floor(Math.random() * 800_000))
}

export function execCases(options: SandboxConformanceOptions, sandboxes: SandboxesUnderTest): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('exec', () => {
    it(
      'runs a command and returns stdout, exit code and timings',
      async () => {
        const result = await sandboxes.sandbox.exec('echo', ['hello', 'world'])
        expect(result).toMatchObject({
          exitCode: 0,
          stdout: 'hello world\n',
          stderr: '',
          timedOut: false,
          aborted: false,
          oomKilled: false,
          stdoutTruncated: false,
          stderrTruncated: false,
        })
        expect(result.durationMs).toBeGreaterThanOrEqual(0)
        // The reference's result has no signal when none ended the command: absent, not null.
        expect(result).not.toHaveProperty('signal')
      },
      timeout,
    )

    it(
      'passes arguments as an argv, never through a shell',
      async () => {
        const hostile = ['$HOME', '`id`', '$(id)', "'; exit 9; '", '*', 'a b', '', '\n']
        const result = await sandboxes.sandbox.exec('printf', ['%s|', ...hostile])
        expect(result.exitCode).toBe(0)
        expect(result.stdout).toBe(`${hostile.join('|')}|`)
      },
      timeout,
    )

    it(
      'returns the exit code the sandbox reported',
      async () => {
        for (const code of [0, 1, 3, 42, 255]) {
          const result = await sandboxes.sandbox.exec('sh', ['-c', `exit ${code}`])
          expect(result.exitCode).toBe(code)
        }
      },
      timeout,
    )

    it(
      'keeps stderr apart from stdout',
      async () => {
        const result = await sandboxes.sandbox.exec('sh', [
          '-c',
          'echo out; echo err >&2; echo out2',
        ])
        expect(result.stdout).toBe('out\nout2\n')
        expect(result.stderr).toBe('err\n')
      },
      timeout,
    )

    it(
      'reports a command that does not exist with exit code 126 or 127',
      async () => {
        const result = await sandboxes.sandbox.exec('/no/such/binary', [])
        expect([126, 127]).toContain(result.exitCode)
      },
      timeout,
    )

    it(
      'streams output to onOutput in order while the command runs',
      async () => {
        const chunks: Array<SandboxOutputChunk & { at: number }> = []
        const started = Date.now()
        const result = await sandboxes.sandbox.exec(
          'sh',
          ['-c', 'echo first; echo oops >&2; sleep 1; echo second'],
          {
            onOutput: (chunk) => chunks.push({ ...chunk, at: Date.now() }),
          },
        )
        const finished = Date.now()
        const stdout = chunks.filter((chunk) => chunk.stream === 'stdout')
        expect(stdout.map((chunk) => chunk.data).join('')).toBe('first\nsecond\n')
        expect(
          chunks
            .filter((chunk) => chunk.stream === 'stderr')
            .map((chunk) => chunk.data)
            .join(''),
        ).toBe('oops\n')
        // The first line arrived well before the command ended: it was streamed, not buffered.
        expect(stdout[0]!.at - started).toBeLessThan(finished - started - 500)
        expect(result.stdout).toBe('first\nsecond\n')
      },
      timeout,
    )

    it(
      'decodes UTF-8 split across writes without garbling it',
      async () => {
        const chunks: string[] = []
        const result = await sandboxes.sandbox.exec(
          'sh',
          [
            '-c',
            "printf 'caf\\303'; sleep 0.3; printf '\\251 \\342\\202'; sleep 0.3; printf '\\254 \\360\\237\\216'; sleep 0.3; printf '\\211\\n'",
          ],
          { onOutput: (chunk) => chunks.push(chunk.data) },
        )
        expect(result.stdout).toBe('café € 🎉\n')
        expect(chunks.join('')).toBe('café € 🎉\n')
        expect(chunks.some((chunk) => chunk.includes('\uFFFD'))).toBe(false)
      },
      timeout,
    )

    it(
      'hands onOutputBytes the bytes the command wrote, binary ones included',
      async () => {
        const pieces: SandboxOutputBytes[] = []
        const result = await sandboxes.sandbox.exec(
          'sh',
          ['-c', "printf '\\377\\376\\000\\001'; printf '\\351' >&2"],
          {
            onOutputBytes: (chunk) => {
              pieces.push(chunk)
            },
          },
        )
        expect(result.exitCode).toBe(0)
        const of = (stream: 'stdout' | 'stderr') =>
          pieces.filter((chunk) => chunk.stream === stream).flatMap((chunk) => [...chunk.bytes])
        expect(of('stdout')).toEqual([0xff, 0xfe, 0x00, 0x01])
        expect(of('stderr')).toEqual([0xe9])
      },
      timeout,
    )

    it(
      'holds the command while onOutputBytes holds a piece, and delivers all of it after',
      async () => {
        // Far more than the pipes, windows and socket buffers between can hold,
        // so the command can only finish writing once the held piece is let go.
        // A TCP path holds the most: Linux grows a receive buffer up to
        // net.ipv4.tcp_rmem's maximum (32 MiB on Debian's kernels) and a send
        // buffer up to 4 MiB; 16 MB once fitted there on a loaded machine.
        const total = 64_000_000
        const marker = `${sandboxes.sandbox.rootDir}/held-output-${uniqueSleep()}`
        let release: () => void = () => {}
        const held = new Promise<void>((resolve) => {
          release = resolve
        })
        let received = 0
        const running = sandboxes.sandbox.exec(
          'sh',
          ['-c', `head -c ${total} /dev/zero; touch ${marker}`],
          {
            timeout: timeout - 5000,
            onOutputBytes: (chunk) => {
              const first = received === 0
              received += chunk.bytes.byteLength
              return first ? held : undefined
            },
          },
        )
        try {
          for (let waited = 0; received === 0 && waited < 20_000; waited += 50)
            await new Promise((resolve) => setTimeout(resolve, 50))
          await new Promise((resolve) => setTimeout(resolve, 2000))
          const early = await sandboxes.sandbox.exec('test', ['-e', marker])
          expect(early.exitCode, 'the command finished writing while its output was held').toBe(1)
          expect(received).toBeLessThan(total)
        } finally {
          release()
        }
        const result = await running
        expect(result.exitCode).toBe(0)
        expect(received).toBe(total)
        expect((await sandboxes.sandbox.exec('test', ['-e', marker])).exitCode).toBe(0)
        await sandboxes.sandbox.exec('rm', ['-f', marker])
      },
      timeout,
    )

    it(
      'applies env and cwd per command',
      async () => {
        const result = await sandboxes.sandbox.exec('sh', ['-c', 'echo "$GREETING"; pwd'], {
          env: { GREETING: 'hi there' },
          cwd: '/tmp',
        })
        expect(result.stdout).toBe('hi there\n/tmp\n')
      },
      timeout,
    )

    it(
      'runs in rootDir by default',
      async () => {
        const result = await sandboxes.sandbox.exec('pwd')
        expect(result.stdout.trim()).toBe(sandboxes.sandbox.rootDir)
      },
      timeout,
    )

    it(
      'delivers stdin and closes it; without stdin, stdin is empty',
      async () => {
        const withInput = await sandboxes.sandbox.exec('cat', [], { stdin: 'line one\nline two\n' })
        expect(withInput.stdout).toBe('line one\nline two\n')
        const binary = await sandboxes.sandbox.exec('wc', ['-c'], {
          stdin: new Uint8Array(70_000).fill(7),
        })
        expect(binary.stdout.trim()).toBe('70000')
        const without = await sandboxes.sandbox.exec('cat', [])
        expect(without).toMatchObject({ exitCode: 0, stdout: '' })
      },
      timeout,
    )

    it(
      'caps kept output at maxOutputBytes and sets the truncation flags',
      async () => {
        const streamed: string[] = []
        const result = await sandboxes.sandbox.exec(
          'sh',
          ['-c', 'head -c 100000 /dev/zero | tr "\\0" a; head -c 10 /dev/zero | tr "\\0" b >&2'],
          {
            maxOutputBytes: 1000,
            onOutput: (chunk) => chunk.stream === 'stdout' && streamed.push(chunk.data),
          },
        )
        expect(result.stdout).toBe('a'.repeat(1000))
        expect(result.stdoutTruncated).toBe(true)
        expect(result.stderr).toBe('bbbbbbbbbb')
        expect(result.stderrTruncated).toBe(false)
        expect(streamed.join('').length).toBe(100_000)
      },
      timeout,
    )

    it(
      'keeps large output whole under the default cap',
      async () => {
        const result = await sandboxes.sandbox.exec('sh', [
          '-c',
          'head -c 3000000 /dev/zero | tr "\\0" x',
        ])
        expect(result.stdout.length).toBe(3_000_000)
        expect(result.stdoutTruncated).toBe(false)
      },
      timeout,
    )

    it(
      'kills the whole process tree on timeout, detached grandchildren included',
      async () => {
        const marker = `cordon-timeout-${Date.now()}`
        const sleep = uniqueSleep()
        const started = Date.now()
        const result = await sandboxes.sandbox.exec(
          'sh',
          [
            '-c',
            `(setsid sh -c 'sleep ${sleep}0; echo ${marker}-grandchild' &); sh -c 'sleep ${sleep}1; echo ${marker}' & wait`,
          ],
          { timeout: 1500 },
        )
        expect(Date.now() - started).toBeLessThan(15_000)
        expect(result.timedOut).toBe(true)
        expect(result.aborted).toBe(false)
        expect(result.signal).toBe('SIGKILL')
        expect(await processesMatching(sandboxes, `sleep ${sleep}`)).toEqual([])
      },
      timeout,
    )

    it(
      'a timeout also ends an exec whose first process exited while a background one holds its output',
      async () => {
        const sleep = uniqueSleep()
        const started = Date.now()
        const result = await sandboxes.sandbox.exec(
          'sh',
          ['-c', `sh -c 'sleep ${sleep}2' & echo started`],
          { timeout: 1500 },
        )
        // Not the background sleep's minutes: what held the output was killed on time.
        expect(Date.now() - started).toBeLessThan(15_000)
        expect(result.stdout).toBe('started\n')
        expect(result.timedOut).toBe(true)
        expect(await processesMatching(sandboxes, `sleep ${sleep}`)).toEqual([])
      },
      timeout,
    )

    it(
      'kills the whole process tree when the signal aborts',
      async () => {
        const controller = new AbortController()
        const sleep = uniqueSleep()
        const pending = sandboxes.sandbox.exec(
          'sh',
          ['-c', `(setsid sh -c 'sleep ${sleep}0' &); sleep ${sleep}1`],
          {
            signal: controller.signal,
          },
        )
        setTimeout(() => controller.abort(), 1000)
        const result = await pending
        expect(result.aborted).toBe(true)
        expect(result.timedOut).toBe(false)
        expect(result.signal).toBe('SIGKILL')
        expect(await processesMatching(sandboxes, `sleep ${sleep}`)).toEqual([])
      },
      timeout,
    )

    it(
      'does not kill a command for printing nothing',
      async () => {
        const result = await sandboxes.sandbox.exec('sh', ['-c', 'sleep 3; echo done'])
        expect(result).toMatchObject({ exitCode: 0, stdout: 'done\n', timedOut: false })
      },
      timeout,
    )

    it(
      'refuses malformed requests with a validation error listing each problem',
      async () => {
        const error = await sandboxes.sandbox
          .exec('', ['ok', 5 as unknown as string], { timeout: -1, env: { 'A-B': 'x' } })
          .catch((caught: unknown) => caught)
        expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
        expect((error as SandboxConfigValidationError).issues.length).toBeGreaterThanOrEqual(4)
        // NUL cannot cross into a process's environment or argv: refused before anything is sent.
        for (const [args, env] of [
          [['ok'], { GOOD: 'a\0b' }],
          [['a\0b'], {}],
        ] as const) {
          const refused = await sandboxes.sandbox
            .exec('echo', [...args], { env })
            .catch((caught: unknown) => caught)
          expect(SandboxConfigValidationError.isInstance(refused)).toBe(true)
          expect((refused as Error).message).toMatch(/NUL/)
        }
      },
      timeout,
    )
  })

  describe('background processes', () => {
    it(
      'starts, streams, takes stdin, and waits',
      async () => {
        const chunks: string[] = []
        const process = await sandboxes.sandbox.start(
          'sh',
          ['-c', 'while read line; do echo "got $line"; done; echo bye'],
          {
            onOutput: (chunk) => chunks.push(chunk.data),
          },
        )
        await process.write('one\n')
        await process.write(new TextEncoder().encode('two\n'))
        await process.closeStdin()
        const result = await process.wait()
        expect(result.exitCode).toBe(0)
        expect(result.stdout).toBe('got one\ngot two\nbye\n')
        expect(chunks.join('')).toBe('got one\ngot two\nbye\n')
      },
      timeout,
    )

    it(
      'kill ends the whole tree of a background process',
      async () => {
        const sleep = uniqueSleep()
        const process = await sandboxes.sandbox.start('sh', [
          '-c',
          `(setsid sh -c 'sleep ${sleep}0' &); sleep ${sleep}1`,
        ])
        await new Promise((resolve) => setTimeout(resolve, 500))
        await process.kill()
        const result = await process.wait()
        expect(result.signal).toBe('SIGKILL')
        expect(await processesMatching(sandboxes, `sleep ${sleep}`)).toEqual([])
      },
      timeout,
    )
  })
}
