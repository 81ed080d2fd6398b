/**
 * The startup clock (src/startup-clock.ts, the agent's launcher/startup-clock.c):
 * preloaded into a gVisor sandbox's agent, and only there, never into the
 * commands the agent starts; and, in a gVisor sandbox's first second, it
 * answers back-to-back clock reads from the last one without letting time go
 * back, on one thread or across two, then steps aside once runsc's clock is
 * calibrated. The clock's behaviour is observed by a probe run with the
 * runtime volume's own Node and loader in a bare gVisor container started for
 * it, with and without the library (fixtures/clock-probe.cjs).
 */
import { arch } from 'node:os'
import { fileURLToPath } from 'node:url'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { currentRuntimeVolume, RUNTIME_MOUNT } from '../src/agent-runtime.js'
import { loaderTakesPreload, STARTUP_CLOCK_FILE } from '../src/startup-clock.js'
import { engineExec } from './engine-exec.js'
import { docker, testProvider } from './test-run.js'

const LIBRARY = `${RUNTIME_MOUNT}/${STARTUP_CLOCK_FILE}`
const FIXTURES = fileURLToPath(new URL('./fixtures', import.meta.url))

interface ClockProbe {
  pairs: number
  equalPairs: number
  decreases: number
  sleptMs: number
  crossThreadBackwards: number
  passingThrough: boolean
  waitedMs: number
}

/** The probe in a new gVisor container, started with `loaderArgs` before the volume's Node. */
async function probeClock(loaderArgs: string[]): Promise<ClockProbe> {
  const container = await docker.createContainer({
    Image: BUSYBOX_IMAGE,
    Entrypoint: [...loaderArgs, `${RUNTIME_MOUNT}/bin/node`, '/probe/clock-probe.cjs'],
    Cmd: [],
    Labels: testRunLabels(),
    HostConfig: {
      Runtime: 'runsc',
      NetworkMode: 'none',
      Mounts: [
        { Type: 'volume', Source: currentRuntimeVolume()!, Target: RUNTIME_MOUNT, ReadOnly: true },
        { Type: 'bind', Source: FIXTURES, Target: '/probe', ReadOnly: true },
      ],
    },
  })
  try {
    await container.start()
    const { StatusCode } = (await container.wait()) as { StatusCode: number }
    const logs = (await container.logs({ stdout: true, stderr: true })).toString('latin1')
    expect(StatusCode, logs).toBe(0)
    const line = logs.split('\n').find((text) => text.includes('"pairs"'))
    expect(line, logs).toBeDefined()
    return JSON.parse(line!.slice(line!.indexOf('{'))) as ClockProbe
  } finally {
    await container.remove({ force: true })
  }
}

describe('the startup clock: preloaded into a gVisor sandbox’s agent only', () => {
  it('is built for x64 and this host’s loader takes it', () => {
    expect(arch()).toBe('x64')
    expect(loaderTakesPreload()).toBe(true)
    expect(loaderTakesPreload('2.29')).toBe(false)
    expect(loaderTakesPreload('2.30')).toBe(true)
    expect(loaderTakesPreload('3.1')).toBe(true)
    expect(loaderTakesPreload('')).toBe(false)
  })

  for (const runtime of ['runc', 'runsc'] as const) {
    it(`${runtime}: the agent ${runtime === 'runsc' ? 'has' : 'does not have'} it, and the sandbox's commands never do`, async () => {
      const provider = testProvider({ runtime })
      try {
        const sandbox = await provider.create()
        const name = `cordon-${sandbox.id}`
        const entry = (await docker.getContainer(name).inspect()).Config.Entrypoint as string[]
        const mapped = await engineExec(
          name,
          ['sh', '-c', 'grep -l cordon-startup-clock /proc/[0-9]*/maps; true'],
          { user: '0' },
        )
        const holders = mapped.output.trim().split('\n').filter(Boolean)
        if (runtime === 'runsc') {
          expect(entry).toContain('--preload')
          expect(entry[entry.indexOf('--preload') + 1]).toBe(LIBRARY)
          // One process holds it: the agent (its command line names agent.cjs).
          expect(holders).toHaveLength(1)
          const cmdline = await engineExec(name, ['cat', holders[0]!.replace('maps', 'cmdline')], {
            user: '0',
          })
          expect(cmdline.output).toContain(`${RUNTIME_MOUNT}/agent.cjs`)
        } else {
          expect(entry).not.toContain('--preload')
          expect(holders).toEqual([])
        }
        const own = await sandbox.exec('sh', ['-c', 'cat /proc/self/maps; env'])
        expect(own.exitCode).toBe(0)
        expect(own.stdout).not.toContain('cordon-startup-clock')
        expect(own.stdout).not.toContain('LD_PRELOAD')
      } finally {
        await provider.close()
      }
    })
  }
})

describe('the startup clock in a gVisor sandbox’s first second', () => {
  it('answers back-to-back reads from the last one, never goes back, keeps time, then steps aside', async () => {
    const provider = testProvider({ runtime: 'runsc' })
    let loader: string[]
    try {
      // The agent's own start: its loader and options, up to its Node.
      const sandbox = await provider.create()
      const entry = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).Config
        .Entrypoint as string[]
      const agent = entry[1] === '--agent' ? entry.slice(2) : entry
      loader = agent.slice(0, agent.indexOf('--preload') + 2)
    } finally {
      await provider.close()
    }
    expect(loader).toEqual([
      expect.stringMatching(/\/ld-linux-x86-64\.so\.2$/),
      '--library-path',
      `${RUNTIME_MOUNT}/lib`,
      '--preload',
      LIBRARY,
    ])
    const without = await probeClock(loader.slice(0, -2))
    const withIt = await probeClock(loader)
    console.log('clock probe, without the library:', without, 'with it:', withIt)

    // Without it, every read in the first second is a fresh one (a system call).
    expect(without.equalPairs).toBe(0)
    // With it, most back-to-back reads are answered from the kept value...
    expect(withIt.equalPairs).toBeGreaterThan(withIt.pairs / 2)
    // ...and time never goes back, on one thread or handed between two.
    for (const probe of [without, withIt]) {
      expect(probe.decreases).toBe(0)
      expect(probe.crossThreadBackwards).toBe(0)
    }
    // A 200 ms sleep (a futex's timeout) is seen as 200 ms, within the
    // library's bound (a kept value is at most 200,000 cycles old: 0.2 ms at
    // 1 GHz), and not much longer on a busy machine.
    expect(withIt.sleptMs).toBeGreaterThanOrEqual(199.8)
    expect(withIt.sleptMs).toBeLessThan(400)
    // Once runsc's clock is calibrated (about a second after the boot), every read is fresh.
    expect(withIt.passingThrough).toBe(true)
  })
})
