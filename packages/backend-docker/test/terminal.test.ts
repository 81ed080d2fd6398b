import type { AgentClient } from '@cordon/agent/sandbox'
import {
  type CordonSandboxProvider,
  SandboxControlRefusedError,
  type SandboxId,
  SandboxOperationError,
  type SandboxTerminal,
} from '@cordon/core'
import type Docker from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openDockerTerminal } from '../src/docker-terminal.js'
import { testProvider } from './test-run.js'

/** Collects what a terminal shows and waits for text to appear in it. */
function screen(terminal: SandboxTerminal) {
  let text = ''
  const waiters = new Set<() => void>()
  terminal.onData((data) => {
    text += Buffer.from(data).toString('utf8')
    for (const wake of waiters) wake()
  })
  return {
    get text() {
      return text
    },
    async waitFor(pattern: RegExp, timeoutMs = 10_000): Promise<RegExpMatchArray> {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const match = text.match(pattern)
        if (match) return match
        if (Date.now() > deadline)
          throw new Error(`timed out waiting for ${pattern} in ${JSON.stringify(text)}`)
        await new Promise<void>((resolve) => {
          const wake = () => {
            waiters.delete(wake)
            resolve()
          }
          waiters.add(wake)
          setTimeout(wake, 100)
        })
      }
    },
    clear() {
      text = ''
    },
  }
}

for (const runtime of ['docker', 'runsc'] as const) {
  describe(`terminals (${runtime})`, () => {
    let provider: CordonSandboxProvider
    beforeAll(() => {
      provider = testProvider({ runtime })
    })
    afterAll(async () => {
      await provider.close()
    })

    it('runs an interactive shell: prompt, line editing, a resize seen by stty, exit code', async () => {
      const sandbox = await provider.create()
      const terminal = await sandbox.openTerminal({
        command: 'sh',
        args: ['-i'],
        env: { PS1: 'cordon$ ' },
        size: { cols: 80, rows: 24 },
      })
      const shown = screen(terminal)
      await shown.waitFor(/cordon\$ /)
      // A typo fixed with backspace, and a word inserted after Ctrl-A (start of line).
      await terminal.write('cho hellx\x7fo\x01e\r')
      await shown.waitFor(/\r\nhello\r\n/)
      // It is a terminal, of the size asked for, then of the new size.
      await terminal.write('[ -t 0 ] && stty size\r')
      await shown.waitFor(/\r\n24 80\r\n/)
      await terminal.resize({ cols: 100, rows: 40 })
      await terminal.write('stty size; id -u\r')
      const [, uid] = await shown.waitFor(/\r\n40 100\r\n(\d+)\r\n/)
      // As the sandbox's own user, like its commands.
      expect(Number(uid)).toBeGreaterThanOrEqual(2 ** 30)
      await terminal.write('exit 3\r')
      expect(await terminal.exited).toBe(3)
      await sandbox.destroy()
    })

    it('kill ends the program and everything it started on the terminal', async () => {
      const sandbox = await provider.create()
      const terminal = await sandbox.openTerminal({
        command: 'sh',
        args: ['-c', '(sleep 300 &); (setsid sleep 301 &); echo started; sleep 302'],
        size: { cols: 80, rows: 24 },
      })
      await screen(terminal).waitFor(/started/)
      // "started" is printed before the shell has exec'd its last sleep (and
      // the background ones may still be starting): wait until all three run.
      await expect
        .poll(
          async () =>
            (
              await sandbox.exec('sh', ['-c', 'ps -o args | grep -c "^sleep 30[0-2]"'])
            ).stdout.trim(),
          { timeout: 10_000 },
        )
        .toBe('3')
      // A terminal counts as running work.
      expect(sandbox.status).toBe('busy')
      await terminal.kill()
      expect(await terminal.exited).not.toBe(0)
      const after = await sandbox.exec('sh', ['-c', 'ps -o args | grep -c "^sleep 30[0-2]"'])
      expect(after.stdout.trim()).toBe('0')
      await sandbox.destroy()
    })

    it('a write after the program exited says so, and the sandbox lives on', async () => {
      const sandbox = await provider.create()
      try {
        const terminal = await sandbox.openTerminal({
          command: 'true',
          size: { cols: 80, rows: 24 },
        })
        expect(await terminal.exited).toBe(0)
        const error = await terminal.write('x').catch((caught: unknown) => caught)
        expect(SandboxOperationError.isInstance(error)).toBe(true)
        expect((error as Error).message).toBe(
          "write failed: the terminal's program has exited (exit code 0); open another terminal",
        )
        expect(sandbox.status).not.toBe('destroyed')
        expect((await sandbox.exec('echo', ['alive'])).stdout).toBe('alive\n')
      } finally {
        await sandbox.destroy()
      }
    })

    it("its program holds no capabilities and reads nothing the sandbox's user cannot", async () => {
      const sandbox = await provider.create()
      try {
        await sandbox.exec('sh', [
          '-c',
          'echo mode-000-content > /tmp/no-read && chmod 000 /tmp/no-read',
        ])
        // The shell itself opens the file (`read` is its own): the program the
        // engine's exec started, not a command it ran.
        const terminal = await sandbox.openTerminal({
          command: 'sh',
          args: [
            '-c',
            'grep CapEff /proc/$$/status; read line < /tmp/no-read && echo "read $line"; echo done',
          ],
          size: { cols: 80, rows: 24 },
        })
        const shown = screen(terminal)
        await shown.waitFor(/done/)
        expect(shown.text).toMatch(/CapEff:\s+0{16}\r\n/)
        expect(shown.text).toContain('Permission denied')
        expect(shown.text).not.toContain('mode-000-content')
        expect(await terminal.exited).toBe(0)
      } finally {
        await sandbox.destroy()
      }
    })

    it('refuses a bad size with a typed error', async () => {
      const sandbox = await provider.create()
      await expect(sandbox.openTerminal({ size: { cols: 0, rows: 24 } })).rejects.toThrow(
        'cols and rows must be integers',
      )
      await sandbox.destroy()
    })
  })
}

describe('a terminal under gVisor without cordon-launcher', () => {
  it('is refused before the engine is asked: its program would keep the capabilities an engine exec starts with there', async () => {
    let asked = false
    const docker = {
      getContainer: () => {
        asked = true
        throw new Error('the engine was asked')
      },
    } as unknown as Docker
    const error = await openDockerTerminal(
      {
        docker,
        containerId: 'c',
        sandboxId: 'sbx_nolauncher' as SandboxId,
        user: { uid: 1000, gid: 1000 },
        env: {},
        workingDirectory: '/workspace',
        agent: {} as AgentClient,
        launcher: undefined,
        backend: 'container:runsc',
        gvisor: true,
      },
      { size: { cols: 80, rows: 24 } },
    ).catch((caught: unknown) => caught)
    expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({ control: 'openTerminal', backend: 'container:runsc' })
    expect(asked).toBe(false)
  })
})
