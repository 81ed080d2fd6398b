/**
 * The microVM backend applies core's one resolver rule: the shared table of
 * answers (from @cordon/conformance, which the egress proxy and the Docker
 * backend run too) becomes the allowlist the rule says, both as encoded for
 * the control plane and through a real create against the orchestrator
 * stand-in (which can enforce only "nothing": it refuses a non-empty list
 * and cuts a guest with `[]` off the network).
 */
import { RESOLVER_ANSWER_CASES } from '@cordon/conformance'
import { SandboxControlRefusedError, type SandboxId } from '@cordon/core'
import { DEFAULT_RESOLVER_TIMEOUT_MS } from '@cordon/core/backend'
import {
  backendCreateRequest,
  startTestOrchestrator,
  type TestOrchestratorStandin,
  testBackendContext,
} from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMicroVMBackend, encodeEgressAllowlist } from '../src/index.js'

describe.each(RESOLVER_ANSWER_CASES)(
  'a resolver answering $name',
  ({ resolve, verdict, hangs }) => {
    it(
      'is encoded as the allowlist the rule gives, or [] with the refusal reported',
      async () => {
        const refusals: string[] = []
        const encoded = await encodeEgressAllowlist(
          { kind: 'resolver', resolve },
          new AbortController().signal,
          (problem) => refusals.push(problem),
        )
        if (verdict.kind === 'enforce') {
          expect(encoded).toEqual(verdict.allowedHosts)
          expect(refusals).toEqual([])
        } else {
          expect(encoded).toEqual([])
          expect(refusals).toHaveLength(1)
        }
      },
      hangs ? DEFAULT_RESOLVER_TIMEOUT_MS + 5_000 : undefined,
    )
  },
)

describe('resolver answers through the orchestrator stand-in', () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it(
    'creates a guest with no network for every answer the rule refuses, and sends every accepted list',
    async () => {
      const { context, events } = testBackendContext()
      const backend = createMicroVMBackend(standin.backendConfig(), context)
      const refusedFor = (id: SandboxId) =>
        events.filter(
          (event) =>
            event.type === 'lifecycle' &&
            event.phase === 'egress.resolver-refused' &&
            event.sandboxId === id,
        )
      try {
        await Promise.all(
          RESOLVER_ANSWER_CASES.map(async ({ name, resolve, verdict }) => {
            const request = backendCreateRequest({ egress: { kind: 'resolver', resolve } })
            const id = request.id
            const created = await backend.create(request).catch((caught: unknown) => caught)
            if (verdict.kind === 'enforce' && verdict.allowedHosts.length > 0) {
              // The stand-in saw a non-empty list, which it cannot enforce.
              expect(SandboxControlRefusedError.isInstance(created), name).toBe(true)
              expect(created, name).toMatchObject({ control: 'egress.resolver' })
              expect(refusedFor(id), name).toEqual([])
              return
            }
            expect(SandboxControlRefusedError.isInstance(created), `${name}: ${created}`).toBe(
              false,
            )
            const sandbox = created as Awaited<ReturnType<typeof backend.create>>
            try {
              const links = await sandbox.exec('ls', ['/sys/class/net'])
              expect(links.stdout.split(/\s+/).filter(Boolean), name).toEqual(['lo'])
            } finally {
              await sandbox.destroy()
            }
            expect(refusedFor(id), name).toHaveLength(verdict.kind === 'deny-everything' ? 1 : 0)
          }),
        )
      } finally {
        await backend.close()
      }
      expect(standin.guests()).toEqual([])
    },
    DEFAULT_RESOLVER_TIMEOUT_MS + 60_000,
  )
})
