import { Buffer } from 'node:buffer'
import type {
  ContainerSandboxLayout,
  ContainerSandboxMountSource,
  CordonProcess,
  CordonSandbox,
  CordonSandboxProvider,
  EgressPolicy,
  ResolvedContainerSandboxLayout,
  Sandbox,
  SandboxBackend,
  SandboxBackendOptions,
  SandboxEnvironment,
  SandboxExecOptions,
  SandboxExecResult,
  SandboxFileEntry,
  SandboxForward,
  SandboxForwardOptions,
  SandboxId,
  SandboxNetworkPolicy,
  SandboxPortForward,
  SandboxProcess,
  SandboxProvider,
  SandboxStatus,
  SandboxUnixSocketForward,
} from '@cordon/core'
import { describe, expectTypeOf, it } from 'vitest'
import type {
  ACIStandbyPoolBackendConfig,
  ContainerBackendConfig,
  MicroVMBackendConfig,
  SandboxBackendConfig,
  SandboxProviderConfig,
} from '../src/index.js'

describe("the reference's shapes", () => {
  it('SandboxId is sbx_-prefixed', () => {
    expectTypeOf<'sbx_abc'>().toMatchTypeOf<SandboxId>()
    expectTypeOf<'abc'>().not.toMatchTypeOf<SandboxId>()
  })

  it("status is the reference's union and paused (only a sandbox the host paused has it); environment is exactly the reference's", () => {
    expectTypeOf<SandboxStatus>().toEqualTypeOf<'creating' | 'ready' | 'busy' | 'destroyed'>()
    expectTypeOf<SandboxEnvironment>().toEqualTypeOf<
      'linux-namespace' | 'macos-seatbelt' | 'basic'
    >()
  })

  it('an object with only the reference members is a Sandbox', () => {
    const seedSandbox = {
      id: 'sbx_x' as SandboxId,
      status: 'ready' as SandboxStatus,
      rootDir: '/mnt/user-data/outputs',
      environment: 'linux-namespace' as SandboxEnvironment,
      exec: async (_command: string, _args?: string[], _opts?: { timeout?: number }) => ({
        exitCode: 0,
        stdout: '',
        stderr: '',
        timedOut: false,
        durationMs: 1,
      }),
      writeFile: async (_path: string, _content: string | Buffer) => {},
      readFile: async (_path: string): Promise<Buffer> => Buffer.alloc(0),
      listFiles: async (_rootPath: string): Promise<readonly SandboxFileEntry[]> => [],
      destroy: async () => {},
    }
    expectTypeOf(seedSandbox).toMatchTypeOf<Sandbox>()
  })

  it('Sandbox keeps the reference members and types', () => {
    expectTypeOf<Sandbox['readFile']>().returns.toEqualTypeOf<Promise<Buffer>>()
    expectTypeOf<Sandbox['listFiles']>().returns.toEqualTypeOf<
      Promise<readonly SandboxFileEntry[]>
    >()
    expectTypeOf<Sandbox['environment']>().toEqualTypeOf<SandboxEnvironment>()
    expectTypeOf<NonNullable<Sandbox['setNetworkPolicy']>>().parameters.toMatchTypeOf<
      [SandboxNetworkPolicy, ...unknown[]]
    >()
    expectTypeOf<SandboxNetworkPolicy>().toEqualTypeOf<{
      readonly allowedHosts: readonly string[]
    }>()
  })

  it('what cordon hands out is a Sandbox with every member', () => {
    expectTypeOf<CordonSandbox>().toMatchTypeOf<Sandbox>()
    expectTypeOf<CordonSandbox['start']>().returns.toEqualTypeOf<Promise<CordonProcess>>()
    expectTypeOf<CordonProcess>().toMatchTypeOf<SandboxProcess>()
    expectTypeOf<CordonSandbox>().toHaveProperty(Symbol.asyncDispose)
    expectTypeOf<SandboxProcess>().toHaveProperty(Symbol.asyncDispose)
  })

  it('exec options and result have the reference fields; signal is absent, not null', () => {
    expectTypeOf<SandboxExecResult['signal']>().toEqualTypeOf<string | undefined>()
    expectTypeOf<{
      exitCode: number
      stdout: string
      stderr: string
      timedOut: boolean
      durationMs: number
    }>().toMatchTypeOf<SandboxExecResult>()
    expectTypeOf<{
      timeout: number
      env: Record<string, string>
      cwd: string
      signal: AbortSignal
    }>().toMatchTypeOf<SandboxExecOptions>()
  })

  it('layouts use type/hostPath/containerPath and resolve to the reference shape', () => {
    expectTypeOf<{
      type: 'hostDir'
      hostPath: string
    }>().toMatchTypeOf<ContainerSandboxMountSource>()
    expectTypeOf<{
      type: 'azureFileShare'
      storageAccountName: string
      shareName: string
      storageAccountKey: string
    }>().toMatchTypeOf<ContainerSandboxMountSource>()
    // The reference's resolved mount, with cordon's optional noexec: either is the other.
    type ReferenceResolvedMount = {
      readonly source: ContainerSandboxMountSource
      readonly containerPath: string
    }
    expectTypeOf<ResolvedContainerSandboxLayout['outputs']['noexec']>().toEqualTypeOf<
      boolean | undefined
    >()
    expectTypeOf<ReferenceResolvedMount>().toMatchTypeOf<
      ResolvedContainerSandboxLayout['outputs']
    >()
    expectTypeOf<
      ResolvedContainerSandboxLayout['outputs']
    >().toMatchTypeOf<ReferenceResolvedMount>()
    expectTypeOf<{
      outputs: { source: { type: 'hostDir'; hostPath: string }; containerPath: string }
      skills: { id: string; source: { type: 'inImage' }; containerPath: string }[]
    }>().toMatchTypeOf<ContainerSandboxLayout>()
  })

  it('EgressPolicy is the reference union', () => {
    expectTypeOf<EgressPolicy>().toEqualTypeOf<
      | { readonly kind: 'deny-all' }
      | { readonly kind: 'allow-all' }
      | { readonly kind: 'static'; readonly allowedHosts: readonly string[] }
      | { readonly kind: 'resolver'; readonly resolve: () => Promise<readonly string[]> }
    >()
  })

  it("backend configs accept the reference's fields", () => {
    expectTypeOf<SandboxBackendConfig>().toEqualTypeOf<
      ContainerBackendConfig | ACIStandbyPoolBackendConfig | MicroVMBackendConfig
    >()
    expectTypeOf<{
      tier: 'container'
      runtime: 'docker'
      image: string
      hostReachability: 'host-port'
      network: 'none'
      labels: Record<string, string>
    }>().toMatchTypeOf<ContainerBackendConfig>()
    expectTypeOf<ACIStandbyPoolBackendConfig['workerPort']>().toEqualTypeOf<number | undefined>()
    expectTypeOf<ACIStandbyPoolBackendConfig['readyPollIntervalMs']>().toEqualTypeOf<
      number | undefined
    >()
    expectTypeOf<NonNullable<MicroVMBackendConfig['mtls']>['cert']>().toEqualTypeOf<
      string | Buffer
    >()
    expectTypeOf<MicroVMBackendConfig['getToken']>().toEqualTypeOf<() => Promise<string>>()
  })

  it('a container provider needs a layout; a microvm provider does not', () => {
    expectTypeOf<{ backend: ContainerBackendConfig }>().not.toMatchTypeOf<SandboxProviderConfig>()
    expectTypeOf<{
      backend: ContainerBackendConfig
      layout: ContainerSandboxLayout
      defaultEgress: EgressPolicy
      defaultTimeoutMs: number
      defaultMemoryLimitMb: number
      defaultMaxProcesses: number
    }>().toMatchTypeOf<SandboxProviderConfig>()
    expectTypeOf<{ backend: MicroVMBackendConfig }>().toMatchTypeOf<SandboxProviderConfig>()
  })

  it('provider and backend contracts', () => {
    expectTypeOf<SandboxProvider['create']>().returns.toEqualTypeOf<Promise<Sandbox>>()
    expectTypeOf<SandboxProvider['environment']>().toEqualTypeOf<SandboxEnvironment>()
    expectTypeOf<CordonSandboxProvider>().toMatchTypeOf<SandboxProvider>()
    expectTypeOf<CordonSandboxProvider['create']>().returns.toEqualTypeOf<Promise<CordonSandbox>>()
    expectTypeOf<SandboxBackend['create']>().parameters.toEqualTypeOf<[SandboxBackendOptions]>()
    expectTypeOf<SandboxBackend['create']>().returns.toEqualTypeOf<Promise<Sandbox>>()
    expectTypeOf<SandboxBackendOptions['workingDirectory']>().toEqualTypeOf<string>()
  })
})

describe('cordon extensions', () => {
  it('forwardPort hands back the kind of forward its options ask for', () => {
    const sandbox = {} as CordonSandbox
    const forwardPort = sandbox.forwardPort!
    expectTypeOf(forwardPort(8080)).resolves.toEqualTypeOf<SandboxPortForward>()
    expectTypeOf(
      forwardPort(8080, { hostAddress: '0.0.0.0', exposeBeyondLoopback: true }),
    ).resolves.toEqualTypeOf<SandboxPortForward>()
    expectTypeOf(
      forwardPort(8080, { unixSocket: true }),
    ).resolves.toEqualTypeOf<SandboxUnixSocketForward>()
    const either = {} as SandboxForwardOptions
    expectTypeOf(forwardPort(8080, either)).resolves.toEqualTypeOf<SandboxForward>()
    // A unix socket has no host address or port to name.
    // @ts-expect-error hostPort belongs to a TCP forward
    void forwardPort(8080, { unixSocket: true, hostPort: 9000 })
    // The overloads survive bind(), as the framework adapters use it.
    const bound = forwardPort.bind(sandbox)
    expectTypeOf(bound(8080)).resolves.toEqualTypeOf<SandboxPortForward>()
  })
})
