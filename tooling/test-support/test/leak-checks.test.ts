import { randomBytes, randomUUID } from 'node:crypto'
import { newSandboxId } from '@cordon/core/backend'
import Dockerode from 'dockerode'
import { describe, expect, it } from 'vitest'
import {
  assertNoEngineLeftovers,
  engineLeftovers,
  startTestOrchestrator,
  TEST_RUN_LABEL,
  testRunLabels,
} from '../src/index.js'

const docker = new Dockerode()

// A leak check that never fails proves nothing: each case leaks on purpose.
describe('the engine leak check', () => {
  it('finds what is labelled with the run, and fails until it is removed', async () => {
    const runId = `leak-selftest-${randomUUID()}`
    const network = await docker.createNetwork({
      Name: `cordon-test-leak-${runId.slice(-8)}`,
      Internal: true,
      Labels: { [TEST_RUN_LABEL]: runId },
    })
    try {
      expect((await engineLeftovers({ runId })).networks).toHaveLength(1)
      await expect(assertNoEngineLeftovers({ runId, graceMs: 0 })).rejects.toThrow(
        /leaked 1 engine resources/,
      )
    } finally {
      await network.remove()
    }
    await assertNoEngineLeftovers({ runId, graceMs: 0 })
  })
})

describe('the orchestrator stand-in launcher', () => {
  it('labels guests with the run, and its close fails while a guest is still alive', async () => {
    const standin = await startTestOrchestrator()
    const sandboxId = newSandboxId()
    const created = await fetch(`${standin.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${standin.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        sandboxId,
        memoryLimitMb: 64,
        maxProcesses: 16,
        egressAllowlist: [],
        agentVsockPort: 1024,
        agentSecret: randomBytes(24).toString('base64url'),
      }),
    })
    expect(created.status).toBe(201)
    const [guest] = await docker.listContainers({
      all: true,
      filters: { label: [`cordon.sandbox=${sandboxId}`] },
    })
    expect(guest?.Labels).toMatchObject(testRunLabels())
    await expect(standin.close()).rejects.toThrow(`guest ${sandboxId} still alive`)
    // Closing removed it all the same.
    expect(
      await docker.listContainers({
        all: true,
        filters: { label: [`cordon.sandbox=${sandboxId}`] },
      }),
    ).toEqual([])
  })

  it('closes cleanly when every guest was deleted', async () => {
    const standin = await startTestOrchestrator()
    await standin.close()
  })
})
