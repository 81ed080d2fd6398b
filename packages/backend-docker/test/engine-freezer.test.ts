import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import type Docker from 'dockerode'
import { describe, expect, it } from 'vitest'
import { pauseContainer, unpauseContainer } from '../src/engine-freezer.js'
import { docker } from './test-run.js'

describe('engine freezer', () => {
  it('returns from an unpause only once the engine no longer records the container as paused', async () => {
    // The engine's record as Docker 20.10 can leave it: still "paused" for a
    // while after the unpause call returned (a late "paused" event).
    const states = [true, true, true, false]
    const calls: string[] = []
    const container = {
      unpause: async () => {
        calls.push('unpause')
      },
      inspect: async () => {
        calls.push('inspect')
        return { State: { Running: true, Paused: states.shift() ?? false } }
      },
    } as unknown as Docker.Container
    await unpauseContainer(container)
    expect(calls).toEqual(['unpause', 'inspect', 'inspect', 'inspect', 'inspect'])
  })

  for (const runtime of ['runc', 'runsc'] as const) {
    it(`pauses and unpauses a real container (${runtime}), and an exec right after an unpause is accepted`, async () => {
      const container = await docker.createContainer({
        Image: BUSYBOX_IMAGE,
        Cmd: ['sleep', '600'],
        Labels: testRunLabels(),
        HostConfig: { NetworkMode: 'none', ...(runtime === 'runsc' ? { Runtime: 'runsc' } : {}) },
      })
      try {
        await container.start()
        for (let round = 0; round < 25; round++) {
          await pauseContainer(container)
          expect((await container.inspect()).State.Paused).toBe(true)
          await unpauseContainer(container)
          // What the engine refused when its record lagged: "unpause the container before exec".
          const exec = await container.exec({ Cmd: ['true'] })
          await exec.start({ Detach: true })
        }
      } finally {
        await container.remove({ force: true })
      }
    }, 120_000)
  }
})
