import { describe, expectTypeOf, it } from 'vitest'
import type {
  ACIStandbyPoolBackendConfig,
  ContainerBackendConfig,
  ContainerSandboxLayout,
  EgressPolicy,
  MicroVMBackendConfig,
  Sandbox,
  SandboxBackend,
  SandboxBackendConfig,
  SandboxExecOptions,
  SandboxExecResult,
  SandboxFileEntry,
  SandboxId,
  SandboxProcess,
  SandboxProvider,
  SandboxProviderConfig,
  SandboxStatus,
} from '../src/index.js'

describe('public shapes', () => {
  it('SandboxId is sbx_-prefixed', () => {
    expectTypeOf<'sbx_abc'>().toMatchTypeOf<SandboxId>()
    expectTypeOf<'abc'>().not.toMatchTypeOf<SandboxId>()
  })

  it('SandboxStatus', () => {
    expectTypeOf<SandboxStatus>().toEqualTypeOf<
      'creating' | 'ready' | 'destroying' | 'destroyed' | 'failed'
    >()
  })

  it('Sandbox keeps the reference members', () => {
    expectTypeOf<Sandbox['id']>().toEqualTypeOf<SandboxId>()
    expectTypeOf<Sandbox['rootDir']>().toEqualTypeOf<string>()
    expectTypeOf<Sandbox['exec']>().parameters.toEqualTypeOf<
      [string, (readonly string[])?, SandboxExecOptions?]
    >()
    expectTypeOf<Sandbox['exec']>().returns.toEqualTypeOf<Promise<SandboxExecResult>>()
    expectTypeOf<Sandbox['listFiles']>().returns.toEqualTypeOf<Promise<SandboxFileEntry[]>>()
    expectTypeOf<Sandbox['readFile']>().returns.toEqualTypeOf<Promise<Uint8Array>>()
    expectTypeOf<Sandbox['start']>().returns.toEqualTypeOf<Promise<SandboxProcess>>()
    expectTypeOf<Sandbox['setNetworkPolicy']>().toEqualTypeOf<Sandbox['setNetworkPolicy']>()
    expectTypeOf<Sandbox>().toHaveProperty('destroy')
  })

  it('SandboxExecResult fills the truncation and cancellation fields', () => {
    expectTypeOf<SandboxExecResult>().toEqualTypeOf<{
      readonly exitCode: number
      readonly stdout: string
      readonly stderr: string
      readonly signal: string | null
      readonly timedOut: boolean
      readonly aborted: boolean
      readonly oomKilled: boolean
      readonly durationMs: number
      readonly stdoutTruncated: boolean
      readonly stderrTruncated: boolean
    }>()
  })

  it('EgressPolicy is a discriminated union', () => {
    expectTypeOf<EgressPolicy['kind']>().toEqualTypeOf<
      'deny-all' | 'allow-all' | 'static' | 'resolver'
    >()
    expectTypeOf<Extract<EgressPolicy, { kind: 'static' }>['allowedHosts']>().toEqualTypeOf<
      readonly string[]
    >()
    expectTypeOf<Extract<EgressPolicy, { kind: 'resolver' }>['resolve']>().toEqualTypeOf<
      () => Promise<readonly string[]>
    >()
  })

  it('the backend config union has three real members', () => {
    expectTypeOf<SandboxBackendConfig>().toEqualTypeOf<
      ContainerBackendConfig | ACIStandbyPoolBackendConfig | MicroVMBackendConfig
    >()
    expectTypeOf<ContainerBackendConfig['runtime']>().toEqualTypeOf<
      'docker' | 'runsc' | undefined
    >()
    expectTypeOf<ACIStandbyPoolBackendConfig['runtime']>().toEqualTypeOf<'aci-standby-pool'>()
    expectTypeOf<MicroVMBackendConfig['orchestratorEndpoint']>().toEqualTypeOf<string>()
    expectTypeOf<MicroVMBackendConfig['getToken']>().toEqualTypeOf<() => Promise<string>>()
  })

  it('a container provider needs a layout; a microvm provider does not', () => {
    expectTypeOf<{ backend: ContainerBackendConfig }>().not.toMatchTypeOf<SandboxProviderConfig>()
    expectTypeOf<{
      backend: ContainerBackendConfig
      layout: ContainerSandboxLayout
    }>().toMatchTypeOf<SandboxProviderConfig>()
    expectTypeOf<{ backend: MicroVMBackendConfig }>().toMatchTypeOf<SandboxProviderConfig>()
  })

  it('provider and backend contracts', () => {
    expectTypeOf<SandboxProvider['create']>().returns.toEqualTypeOf<Promise<Sandbox>>()
    expectTypeOf<SandboxBackend['create']>().returns.toEqualTypeOf<Promise<Sandbox>>()
    expectTypeOf<SandboxProvider['id']>().toEqualTypeOf<string>()
  })
})
