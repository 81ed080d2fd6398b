import { describe, expect, it } from 'vitest'
import { HOST_SOCKETS_RUNTIME } from '../src/direct-socket.js'
import { docker, testProvider } from './test-run.js'

describe('runtime names', () => {
  it.each([
    ['runc', 'runc'],
    ['docker', 'runc'],
    ['runsc', 'runsc'],
  ] as const)('runtime %s runs its sandboxes under %s', async (runtime, engineRuntime) => {
    const provider = testProvider({ runtime })
    try {
      const sandbox = await provider.create()
      expect((await sandbox.exec('echo', ['ok'])).stdout).toBe('ok\n')
      const info = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      // `docker` leaves the choice to the engine, whose default here is runc; `runc` names it.
      // gVisor without a writable host mount runs under runsc with host sockets (direct-socket.ts).
      expect(info.HostConfig.Runtime).toBe(
        engineRuntime === 'runsc' ? HOST_SOCKETS_RUNTIME : engineRuntime,
      )
      expect(provider.name).toBe(
        `@cordon/sandbox: container:${runtime === 'runsc' ? 'runsc' : 'docker'}`,
      )
    } finally {
      await provider.close()
    }
  })
})
