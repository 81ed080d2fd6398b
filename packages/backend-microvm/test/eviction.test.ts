import {
  endReasonOf,
  startTestOrchestrator,
  type TestOrchestratorStandin,
} from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMicroVMSandboxProvider } from '../src/index.js'

/**
 * A guest the orchestrator removes underneath its host (a host failure, an
 * operator): the next operation that cannot reach the agent asks the control
 * plane about it, and the sandbox ends with `evicted`.
 */
describe('a guest removed behind the host (orchestrator stand-in)', () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it('ends the sandbox with end reason evicted', async () => {
    const token = standin.token
    const provider = createMicroVMSandboxProvider({ backend: standin.backendConfig() })
    try {
      const sandbox = await provider.create()
      expect((await sandbox.exec('echo', ['up'])).stdout).toBe('up\n')
      const deleted = await fetch(`${standin.url}/v1/sandboxes/${sandbox.id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${token}` },
      })
      expect(deleted.status).toBe(204)
      const failed = await sandbox.exec('echo', ['gone?']).catch((error: unknown) => error)
      expect(failed).toBeInstanceOf(Error)
      expect(await endReasonOf(sandbox)).toBe('evicted')
    } finally {
      await provider.close()
    }
  }, 120_000)
})
