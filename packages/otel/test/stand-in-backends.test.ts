import { aciEntrypointPath, createAciSandboxProvider } from '@cordon/backend-aci'
import { createMicroVMSandboxProvider } from '@cordon/backend-microvm'
import type { CordonSandboxProvider } from '@cordon/core'
import {
  closeTestArmStandin,
  OUTPUTS_IN_IMAGE,
  startTestArmStandin,
  startTestOrchestrator,
  type TestArmStandin,
  type TestOrchestratorStandin,
} from '@cordon/test-support'
import { afterAll, describe, expect, it } from 'vitest'
import { cordonTelemetry } from '../src/index.js'
import { childrenOf, inMemoryOtel } from './in-memory-otel.js'

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
  let orchestrator: TestOrchestratorStandin | undefined
  let arm: TestArmStandin | undefined
  afterAll(async () => {
    telemetry.endOpenSpans()
    await otel.shutdown()
    await orchestrator?.close()
    await closeTestArmStandin(arm)
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
    orchestrator = await startTestOrchestrator()
    await traceOfOneSandbox(
      createMicroVMSandboxProvider({
        backend: orchestrator.backendConfig(),
        onEvent: telemetry.onEvent,
      }),
      'microvm:self-hosted',
    )
  }, 120_000)

  it('container:aci-standby-pool: create, a file, an exec and destroy under one root span', async () => {
    arm = await startTestArmStandin({ entrypointPath: aciEntrypointPath() })
    const token = arm.token
    await traceOfOneSandbox(
      createAciSandboxProvider({
        backend: { ...arm.backendConfig(), getArmToken: async () => token },
        layout: OUTPUTS_IN_IMAGE,
        onEvent: telemetry.onEvent,
      }),
      'container:aci-standby-pool',
    )
  }, 120_000)
})
