import { randomBytes } from 'node:crypto'
import type { CordonSandbox } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { describeAlongside } from './run-alongside.js'
import { testProvider } from './test-run.js'

/**
 * A killed exec ends every process it started, also one that left the
 * exec's process group and session (`setsid`), was orphaned away from the
 * exec's tree (a double fork re-parents it to the container's init) and
 * cleared its whole environment (`env -i`, which drops the exec's marker
 * variable). Seen from inside real sandboxes, under runc and under gVisor.
 */

const OUTPUTS = '/mnt/user-data/outputs'

/**
 * A shell line that leaves behind a heartbeat writer escaping by every means
 * above, then waits for minutes. The writer's script carries `needle`, so a
 * later look at /proc can find it; its output goes to /dev/null, so it does
 * not hold the exec's pipes.
 */
function escapeeLine(needle: string, heartbeat: string): string {
  const writer = `while :; do echo beat >> ${heartbeat}; sleep 0.2; done # ${needle}`
  return `(setsid env -i sh -c '${writer}' >/dev/null 2>&1 </dev/null &); sleep 600`
}

/**
 * Pids of the sandbox's processes whose command line holds `needle`. The
 * needle reaches the scan in its environment and is matched by the shell
 * itself, so no process of the scan has it in its own command line.
 */
async function processesWith(sandbox: CordonSandbox, needle: string): Promise<string[]> {
  const scan = await sandbox.exec(
    'sh',
    [
      '-c',
      'for p in /proc/[0-9]*; do case "$(tr "\\0" " " < $p/cmdline 2>/dev/null)" in *"$NEEDLE"*) echo ${p#/proc/};; esac; done',
    ],
    { env: { NEEDLE: needle } },
  )
  return scan.stdout.split('\n').filter(Boolean)
}

async function heartbeatSize(sandbox: CordonSandbox, heartbeat: string): Promise<number> {
  const result = await sandbox.exec('sh', ['-c', `wc -c < ${heartbeat} 2>/dev/null || echo 0`])
  return Number(result.stdout.trim())
}

/** Waits (by exec round trips, at most about 10 s) until the escapee has written its first beat. */
async function escapeeRunning(sandbox: CordonSandbox, heartbeat: string): Promise<void> {
  for (let attempt = 0; attempt < 100; attempt++) {
    if ((await heartbeatSize(sandbox, heartbeat)) > 0) return
    await sandbox.exec('sleep', ['0.1'])
  }
  throw new Error('the escapee never wrote a heartbeat')
}

/** The escapee is gone: no process has the needle, and the heartbeat stops growing. */
async function expectEscapeeGone(
  sandbox: CordonSandbox,
  needle: string,
  heartbeat: string,
): Promise<void> {
  expect(await processesWith(sandbox, needle)).toEqual([])
  const before = await heartbeatSize(sandbox, heartbeat)
  expect(before).toBeGreaterThan(0)
  await sandbox.exec('sleep', ['1'])
  expect(await heartbeatSize(sandbox, heartbeat)).toBe(before)
}

for (const runtime of ['runc', 'runsc'] as const) {
  describeAlongside(
    `a killed exec ends its setsid, env -i, double-forked grandchildren (${runtime})`,
    () => {
      const provider = testProvider({ runtime })
      let sandbox: CordonSandbox

      beforeAll(async () => {
        sandbox = await provider.create()
      })
      afterAll(async () => {
        await provider.close()
      })

      const fresh = () => {
        const needle = `escapee-${randomBytes(6).toString('hex')}`
        return { needle, heartbeat: `${OUTPUTS}/${needle}.beats` }
      }

      it('tags each exec with a supplementary group of its own, from 2^31 up, which a setsid env -i grandchild keeps', async () => {
        const groupsLine = "grep '^Groups:' /proc/self/status"
        const seen = await Promise.all(
          [1, 2].map(() =>
            sandbox.exec('sh', [
              '-c',
              `${groupsLine}; (setsid env -i sh -c "${groupsLine}" &); sleep 0.5`,
            ]),
          ),
        )
        const tags = seen.map((result) => {
          const lines = result.stdout
            .trim()
            .split('\n')
            .map((line) => line.trim())
          expect(lines).toHaveLength(2)
          // The exec's shell and its escaped grandchild: the same one group.
          expect(lines[1]).toBe(lines[0])
          const groups = lines[0]!.replace('Groups:', '').trim().split(/\s+/).map(Number)
          expect(groups).toHaveLength(1)
          expect(groups[0]).toBeGreaterThanOrEqual(2 ** 31)
          return groups[0]
        })
        expect(tags[0]).not.toBe(tags[1])
        const id = await sandbox.exec('id', ['-G'])
        expect(id.stdout.trim().split(' ')).toHaveLength(2)
      })

      it('on timeout', async () => {
        const { needle, heartbeat } = fresh()
        const result = await sandbox.exec('sh', ['-c', escapeeLine(needle, heartbeat)], {
          timeout: 2_000,
        })
        expect(result.timedOut).toBe(true)
        await expectEscapeeGone(sandbox, needle, heartbeat)
      })

      it('on abort', async () => {
        const { needle, heartbeat } = fresh()
        const controller = new AbortController()
        const pending = sandbox.exec('sh', ['-c', escapeeLine(needle, heartbeat)], {
          signal: controller.signal,
        })
        await escapeeRunning(sandbox, heartbeat)
        controller.abort()
        expect((await pending).aborted).toBe(true)
        await expectEscapeeGone(sandbox, needle, heartbeat)
      })

      it("on a background process's kill()", async () => {
        const { needle, heartbeat } = fresh()
        const started = await sandbox.start('sh', ['-c', escapeeLine(needle, heartbeat)])
        await escapeeRunning(sandbox, heartbeat)
        await started.kill()
        expect((await started.wait()).signal).toBe('SIGKILL')
        await expectEscapeeGone(sandbox, needle, heartbeat)
      })

      it("leaves running what an exec that ended by itself left behind, also through another exec's kill", async () => {
        const { needle, heartbeat } = fresh()
        const line = escapeeLine(needle, heartbeat).replace(/; sleep 600$/, '; exit 0')
        expect((await sandbox.exec('sh', ['-c', line])).exitCode).toBe(0)
        await escapeeRunning(sandbox, heartbeat)
        const other = fresh()
        const killed = await sandbox.exec(
          'sh',
          ['-c', escapeeLine(other.needle, other.heartbeat)],
          {
            timeout: 1_000,
          },
        )
        expect(killed.timedOut).toBe(true)
        expect(await processesWith(sandbox, needle)).toHaveLength(1)
        // Ended here, so that nothing outlives the test but the sandbox itself.
        for (const pid of await processesWith(sandbox, needle))
          await sandbox.exec('kill', ['-KILL', pid])
      })
    },
  )
}
