import type {
  SandboxAgentHandle,
  VsockExecuteRequest,
  VsockTransportOptions,
} from '@cordon/builtin-backends'
import type { AgentHealthReport, SandboxExecResult } from '@cordon/core'
import { requireAgentSecret } from '@cordon/core/backend'
import { BACKEND_PACKAGES } from './backend-packages.js'
import { loadBackendModule } from './load-backend.js'

interface TransportImplementation {
  healthz(signal?: AbortSignal): Promise<boolean>
  health(signal?: AbortSignal): Promise<AgentHealthReport>
  waitForReady(timeoutMs: number, pollIntervalMs?: number): Promise<AgentHealthReport>
  execute(request: VsockExecuteRequest): Promise<SandboxExecResult>
  writeFile(path: string, content: string | Uint8Array, signal?: AbortSignal): Promise<void>
  readFile(path: string, signal?: AbortSignal): Promise<Buffer>
}

type TransportModule = {
  readonly VsockAgentTransport: new (
    handle: SandboxAgentHandle,
    options: VsockTransportOptions,
  ) => TransportImplementation
}

/**
 * The reference exported its microVM agent transport from the package root,
 * so this one is here too. It is a thin front for `VsockAgentTransport` of
 * `@cordon/backend-microvm` (an optional peer, loaded on first use; without
 * it, the first call fails with `SandboxBackendNotInstalledError` naming the
 * package). Every method is the backend's; the secret is checked here, at
 * construction, as the backend does.
 */
export class VsockAgentTransport implements TransportImplementation {
  #implementation: Promise<TransportImplementation> | undefined

  constructor(
    readonly handle: SandboxAgentHandle,
    private readonly options: VsockTransportOptions = {},
  ) {
    requireAgentSecret(options.secret, 'VsockAgentTransport options')
  }

  /** `true` when the agent answers health, `false` when it cannot be reached (see the backend's). */
  async healthz(signal?: AbortSignal): Promise<boolean> {
    return (await this.#load()).healthz(signal)
  }

  /** The agent's health answer (its roots, its resumes). */
  async health(signal?: AbortSignal): Promise<AgentHealthReport> {
    return (await this.#load()).health(signal)
  }

  async waitForReady(timeoutMs: number, pollIntervalMs?: number): Promise<AgentHealthReport> {
    return (await this.#load()).waitForReady(timeoutMs, pollIntervalMs)
  }

  async execute(request: VsockExecuteRequest): Promise<SandboxExecResult> {
    return (await this.#load()).execute(request)
  }

  async writeFile(path: string, content: string | Uint8Array, signal?: AbortSignal): Promise<void> {
    return (await this.#load()).writeFile(path, content, signal)
  }

  async readFile(path: string, signal?: AbortSignal): Promise<Buffer> {
    return (await this.#load()).readFile(path, signal)
  }

  #load(): Promise<TransportImplementation> {
    this.#implementation ??= loadBackendModule(
      'microvm:self-hosted',
      BACKEND_PACKAGES['microvm:self-hosted'],
    ).then((module) => {
      const { VsockAgentTransport: Implementation } = module as unknown as TransportModule
      return new Implementation(this.handle, this.options)
    })
    return this.#implementation
  }
}
