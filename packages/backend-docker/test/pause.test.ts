import {
  type CordonSandbox,
  type CordonSandboxProvider,
  type SandboxEvent,
  SandboxPausedError,
} from '@cordon/core'
import { LABEL, ownerLabels } from '@cordon/core/backend'
import { BUSYBOX_IMAGE, endReasonOf, testRunLabels } from '@cordon/test-support'
import type Docker from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collectGarbage } from '../src/index.js'
import { describeAlongside } from './run-alongside.js'
import { docker, testProvider } from './test-run.js'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * A loop that counts as fast as it can, the count always whole in
 * /tmp/counter, beside the longest time it ever went between two rounds
 * (in hundredths of a second of the sandbox's own uptime): a freeze shows
 * there as a gap as long as the pause, however slowly a loaded machine
 * answers the reads around it.
 */
const COUNTER_LOOP = [
  '-c',
  [
    'i=0; last=; gap=0',
    'while :; do',
    // Hundredths as 1xx - 100: a fraction like 09 would read as octal.
    '  i=$((i+1)); read up rest < /proc/uptime; now=$((${up%.*} * 100 + 1${up#*.} - 100))',
    '  if [ -n "$last" ] && [ $((now - last)) -gt $gap ]; then gap=$((now - last)); fi; last=$now',
    '  echo "$i $gap" > /tmp/counter.new; mv /tmp/counter.new /tmp/counter',
    'done',
  ].join('\n'),
]

async function counterState(
  sandbox: CordonSandbox,
): Promise<{ count: number; longestGapMs: number }> {
  const result = await sandbox.exec('cat', ['/tmp/counter'])
  const [count, gap] = result.stdout.trim().split(' ').map(Number)
  return { count: count!, longestGapMs: gap! * 10 }
}

async function counter(sandbox: CordonSandbox): Promise<number> {
  return (await counterState(sandbox)).count
}

async function cpuMs(sandbox: CordonSandbox): Promise<number> {
  const { cpuTimeMs } = await sandbox.stats()
  if (cpuTimeMs === undefined) throw new Error('the engine reported no CPU time')
  return cpuTimeMs
}

async function engineState(sandbox: CordonSandbox) {
  const inspected = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
  return { status: inspected.State.Status, paused: inspected.State.Paused }
}

for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`pause and resume (${runtime})`, () => {
    let provider: CordonSandboxProvider
    const events: SandboxEvent[] = []
    beforeAll(() => {
      provider = testProvider({ runtime, cpus: 1 }, { onEvent: (event) => events.push(event) })
    })
    afterAll(async () => {
      await provider.close()
    })

    it('freezes every process: a counting loop stops and uses no CPU while paused, and goes on after resume', async () => {
      const sandbox = await provider.create()
      try {
        const loop = await sandbox.start('sh', COUNTER_LOOP)
        await sleep(500)
        // How much the loop counts and burns in 2 s while it runs.
        const [countBefore, cpuBefore] = [await counter(sandbox), await cpuMs(sandbox)]
        await sleep(2_000)
        const [countRunning, cpuRunning] = [await counter(sandbox), await cpuMs(sandbox)]
        const counted = countRunning - countBefore
        const burned = cpuRunning - cpuBefore
        expect(counted).toBeGreaterThan(20)
        expect(sandbox.status).toBe('busy')

        const { count: atPause, longestGapMs: gapBeforePause } = await counterState(sandbox)
        await sandbox.pause()
        expect(sandbox.paused).toBe(true)
        expect(sandbox.status).toBe('busy')
        expect(await engineState(sandbox)).toEqual({ status: 'paused', paused: true })
        // stats() answers while paused, from the engine alone; over 2 s the sandbox burns nothing.
        const cpuPaused = await cpuMs(sandbox)
        await sleep(2_000)
        const burnedPaused = (await cpuMs(sandbox)) - cpuPaused
        // Refused before anything reaches the frozen sandbox.
        for (const call of [
          () => sandbox.exec('cat', ['/tmp/counter']),
          () => sandbox.readFile('/tmp/counter'),
          () => sandbox.writeFile('x.txt', 'x'),
          () => sandbox.listFiles(),
          () => sandbox.start('true'),
        ]) {
          const error = await call().catch((caught: unknown) => caught)
          expect(SandboxPausedError.isInstance(error)).toBe(true)
        }
        await sandbox.resume()
        expect(sandbox.status).toBe('busy')
        expect(await engineState(sandbox)).toEqual({ status: 'running', paused: false })
        const { count: atResume, longestGapMs } = await counterState(sandbox)
        await sleep(1_000)
        const afterResume = await counter(sandbox)
        console.log(
          `${runtime}: running 2 s: counted ${counted}, CPU ${burned} ms; paused 2 s: CPU ${burnedPaused} ms, counted ${atResume - atPause} across the pause (read, pause, 2 s, resume, read); the loop's longest stop ${gapBeforePause} ms before the pause, ${longestGapMs} ms after it; 1 s after resume: counted ${afterResume - atResume}`,
        )
        // The loop stood still for the whole pause (2 s and the refusals),
        // as it never did while it ran. (How much it counted across the
        // pause depends on how long the reads and calls around the freeze
        // took: on a loaded CI machine, more than a second of counting.)
        expect(longestGapMs).toBeGreaterThanOrEqual(1_900)
        expect(gapBeforePause).toBeLessThan(1_900)
        expect(afterResume).toBeGreaterThan(atResume)
        expect(burned).toBeGreaterThan(300)
        // runc: the frozen cgroup is charged nothing; gVisor's own kernel
        // wakes a few times (about 4 ms in 5 s measured here).
        expect(burnedPaused).toBeLessThanOrEqual(runtime === 'docker' ? 0 : 40)
        await loop.kill()
        const phases = events
          .filter((event) => event.type === 'lifecycle' && event.sandboxId === sandbox.id)
          .map((event) => (event as { phase: string }).phase)
        expect(phases).toEqual(expect.arrayContaining(['pause', 'resume']))
      } finally {
        await sandbox.destroy()
      }
    })

    it('a pause longer than the idle timeout and the agent connections’ silence budget ends neither', async () => {
      // The agent's connections end after 20 s of silence (heartbeats every
      // 5 s); the pause is 25 s.
      const [working, idle] = await Promise.all([
        provider.create(),
        provider.create({ idleTimeoutMs: 3_000 }),
      ])
      try {
        let ticks = 0
        const ticker = await working.start('sh', ['-c', 'while :; do echo tick; sleep 0.2; done'], {
          onOutput: (chunk) => {
            ticks += chunk.data.split('tick').length - 1
          },
        })
        await sleep(1_000)
        // The idle clock from zero: 3 s of idleness are left when the pause starts.
        idle.keepAlive()
        await Promise.all([working.pause(), idle.pause()])
        const ticksAtPause = ticks
        await sleep(25_000)
        expect(working.endReason).toBeUndefined()
        expect(idle.endReason).toBeUndefined()
        expect(idle.paused).toBe(true)
        expect(idle.status).toBe('busy')
        // Frozen means no output either (a tick in flight at the freeze may land).
        expect(ticks - ticksAtPause).toBeLessThanOrEqual(1)
        await Promise.all([working.resume(), idle.resume()])
        expect((await idle.exec('echo', ['alive'])).stdout).toBe('alive\n')
        const idleSince = Date.now()
        // The started command's own connection came through: its output goes on.
        const ticksAtResume = ticks
        // Three more ticks come within seconds (a loaded gVisor host once took over 1.5 s).
        for (let waited = 0; waited < 15_000 && ticks <= ticksAtResume + 2; waited += 250)
          await sleep(250)
        expect(ticks).toBeGreaterThan(ticksAtResume + 2)
        expect((await working.exec('echo', ['alive'])).stdout).toBe('alive\n')
        // The idle clock runs again: 3 s after that exec, the idle one ends.
        expect(await endReasonOf(idle, 10_000)).toBe('idle')
        expect(Date.now() - idleSince).toBeGreaterThanOrEqual(2_900)
        await ticker.kill()
      } finally {
        await Promise.all([working.destroy(), idle.destroy()])
      }
    }, 90_000)

    it('a pause longer than what is left of the lifetime does not end it: the lifetime counts running time', async () => {
      const lifetimeMs = 5_000
      const sandbox = await provider.create({ lifetimeMs })
      try {
        await sleep(1_000)
        await sandbox.pause()
        const pausedAt = Date.now()
        // Past the lifetime in wall-clock time, by far.
        await sleep(7_000)
        expect(sandbox.endReason).toBeUndefined()
        await sandbox.resume()
        const resumedAt = Date.now()
        // The agent's own clock was held too: it does not end the sandbox as it thaws.
        await sleep(500)
        expect((await sandbox.exec('echo', ['alive'])).stdout).toBe('alive\n')
        expect(await endReasonOf(sandbox, 15_000)).toBe('lifetime')
        const ranAfterResume = Date.now() - resumedAt
        console.log(
          `${runtime}: paused ${resumedAt - pausedAt} ms; lifetime ${lifetimeMs} ms ended ${ranAfterResume} ms after the resume`,
        )
        // About 4 s were left at the pause, less the agent's part of the create
        // and of the pause, which a loaded gVisor host stretches to a second or more.
        expect(ranAfterResume).toBeGreaterThan(1_500)
        expect(ranAfterResume).toBeLessThan(8_000)
      } finally {
        await sandbox.destroy()
      }
    }, 60_000)

    it('destroys a paused sandbox and leaves nothing', async () => {
      const sandbox = await provider.create()
      await sandbox.start('sh', COUNTER_LOOP)
      await sandbox.pause()
      const started = Date.now()
      await sandbox.destroy()
      // Well within the engine's 10 s kill timeout: the container was thawed, not killed frozen.
      expect(Date.now() - started).toBeLessThan(8_000)
      expect(sandbox.status).toBe('destroyed')
      expect(sandbox.endReason).toBe('destroyed')
      await expect(docker.getContainer(`cordon-${sandbox.id}`).inspect()).rejects.toThrow(
        /no such container/i,
      )
    })

    it('cordon gc keeps a live owner’s paused sandbox past its label’s lifetime, and removes a dead or unjudged owner’s paused one', async () => {
      const sandbox = await provider.create({ lifetimeMs: 60_000 })
      const made: Docker.Container[] = []
      const pausedContainer = async (labels: Record<string, string>) => {
        const container = await docker.createContainer({
          Image: BUSYBOX_IMAGE,
          Cmd: ['sleep', '600'],
          Labels: { ...labels, [LABEL.role]: 'sandbox', ...testRunLabels() },
          HostConfig: { NetworkMode: 'none', ...(runtime === 'runsc' ? { Runtime: 'runsc' } : {}) },
        })
        made.push(container)
        try {
          await container.start()
          await container.pause()
        } catch (error) {
          // A dead owner's sandbox by its labels: a sweep of another test's
          // provider on this engine may remove it between these calls.
          for (let waited = 0; waited < 10_000; waited += 250) {
            if (
              await container.inspect().then(
                () => false,
                () => true,
              )
            )
              return container
            await sleep(250)
          }
          throw error
        }
        return container
      }
      try {
        await sandbox.pause()
        // Past the lifetime its label records: the owner (this process) is alive and keeps it.
        const later = await collectGarbage({ docker, dryRun: true, now: Date.now() + 120_000 })
        const containerId = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).Id
        expect(later.containers).not.toContain(containerId)

        const own = ownerLabels('prv_i29pausegc')
        // An owner that is gone (its process's start token differs), and one this
        // process cannot judge (another PID namespace) whose label's lifetime has
        // passed: the label is not moved by pauses, so that one goes too.
        const orphan = await pausedContainer({ ...own, [LABEL.ownerStart]: 'gone-owner' })
        const unjudged = await pausedContainer({
          ...own,
          [LABEL.ownerPidNamespace]: 'pid:[1]',
          [LABEL.expires]: String(Date.now() - 1),
        })
        const report = await collectGarbage({ docker })
        const ids = [orphan.id, unjudged.id]
        const gone = async (container: Docker.Container) =>
          container.inspect().then(
            () => false,
            () => true,
          )
        // Another provider's sweep on this shared engine may have removed one
        // first, or be removing it still: the engine then answers this sweep
        // "removal already in progress", which the sweep rightly leaves to the
        // other, and a paused gVisor container takes a moment to go.
        const goneWithin = async (container: Docker.Container, ms: number) => {
          for (let waited = 0; waited < ms; waited += 250) {
            if (await gone(container)) return true
            await sleep(250)
          }
          return gone(container)
        }
        for (const container of [orphan, unjudged]) {
          expect(report.containers.includes(container.id) || (await gone(container))).toBe(true)
        }
        expect(report.failed.filter((failure) => ids.includes(failure.id))).toEqual([])
        for (const container of [orphan, unjudged])
          expect(await goneWithin(container, 15_000)).toBe(true)
        expect((await engineState(sandbox)).paused).toBe(true)
        await sandbox.resume()
        expect((await sandbox.exec('echo', ['kept'])).stdout).toBe('kept\n')
      } finally {
        await sandbox.destroy()
        for (const container of made) {
          await container.unpause().catch(() => {})
          await container.remove({ force: true }).catch(() => {})
        }
      }
    })
  })
}
