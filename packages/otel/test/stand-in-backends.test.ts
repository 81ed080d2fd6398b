import { randomBytes } from 'node:crypto'
import { type ArmStandin, startArmStandin } from '@cordon/arm-standin'
import { aciEntrypointPath, createAciSandboxProvider } from '@cordon/backend-aci'
import { createMicroVMSandboxProvider } from '@cordon/backend-microvm'
import type { CordonSandboxProvider } from '@cordon/core'
import { type OrchestratorStandin, startOrchestratorStandin } from '@cordon/orchestrator-standin'
import { afterAll, describe, expect, it } from 'vitest'
import { cordonTelemetry } from '../src/index.js'
import { childrenOf, inMemoryOtel } from './in-memory-otel.js'

const RUN_LABELS = { 'cordon.test-run': process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}` }

/**
 * The same telemetry from the backends cordon proves through stand-ins:
 * the microVM tier (orchestrator stand-in) and ACI standby pools (ARM
 * stand-in). The events are core's on every backend; this shows the trace a
 * host gets from each.
 */
describe('telemetry of microVM and ACI sandboxes (stand-ins), read back through the SDK', () => {
  const otel = inMemoryOtel()
  const telemetry = cordonTelemetry({
    tracerProvider: otel.tracerProvider,
    meterProvider: otel.meterProvider,
  })
  let orchestrator: OrchestratorStandin | undefined
  let arm: ArmStandin | undefined
  afterAll(async () => {
    telemetry.endOpenSpans()
    await otel.shutdown()
    await orchestrator?.close()
    await arm?.close()
  }, 120_000)

  const traceOfOneSandbox = async (hosted: CordonSandboxProvider, backend: string) => {
    const sandbox = await hosted.create()
    await sandbox.writeFile('note.txt', 'traced\n')
    expect((await sandbox.exec('cat', ['note.txt'])).stdout).toBe('traced\n')
    await sandbox.destroy()
    await hosted.close()
    const root = otel
      .spans()
      .find(
        (span) =>
          span.name === 'cordon.sandbox' && span.attributes['cordon.sandbox.id'] === sandbox.id,
      )
    expect(root, 'a root span for the sandbox').toBeDefined()
    expect(root!.attributes).toMatchObject({
      'cordon.sandbox.backend': backend,
      'cordon.sandbox.end_reason': 'destroyed',
    })
    expect(childrenOf(otel.spans(), root).map((span) => span.name)).toEqual([
      'cordon.sandbox.create',
      'cordon.file.write',
      'cordon.exec',
      'cordon.sandbox.destroy',
    ])
  }

  it('microvm:self-hosted: create, a file, an exec and destroy under one root span', async () => {
    const token = randomBytes(24).toString('base64url')
    orchestrator = await startOrchestratorStandin({ token, labels: RUN_LABELS })
    await traceOfOneSandbox(
      createMicroVMSandboxProvider({
        backend: {
          tier: 'microvm',
          service: 'self-hosted',
          orchestratorEndpoint: orchestrator.url,
          getToken: async () => token,
        },
        onEvent: telemetry.onEvent,
      }),
      'microvm:self-hosted',
    )
  }, 120_000)

  it('container:aci-standby-pool: create, a file, an exec and destroy under one root span', async () => {
    const token = randomBytes(24).toString('base64url')
    arm = await startArmStandin({
      token,
      retryAfterSeconds: 0,
      entrypointPath: aciEntrypointPath(),
      labels: RUN_LABELS,
    })
    await arm.poolSettled()
    await traceOfOneSandbox(
      createAciSandboxProvider({
        backend: { ...arm.backendConfig(), getArmToken: async () => token },
        layout: { outputs: { source: { type: 'inImage' } } },
        onEvent: telemetry.onEvent,
      }),
      'container:aci-standby-pool',
    )
  }, 120_000)
})
