import type { Buffer } from 'node:buffer'
import type { SandboxEvent } from './events.js'
import type {
  CordonSandbox,
  SandboxByteSource,
  SandboxDestroyOptions,
  SandboxEnvironment,
  SandboxExecOptions,
  SandboxExecResult,
  SandboxFileContent,
  SandboxFileEntry,
  SandboxFileOptions,
  SandboxFileWrite,
  SandboxNetworkPolicy,
  SandboxPortForward,
  SandboxPortForwardOptions,
  SandboxProcess,
  SandboxReadFileOptions,
  SandboxStartOptions,
  SandboxStatus,
  SandboxWriteFileOptions,
} from './sandbox.js'
import type { SandboxId } from './sandbox-id.js'

export interface ManagedSandboxHooks {
  readonly backend: string
  /** Destroy the sandbox this long after it was handed out; undefined for never. */
  readonly lifetimeMs: number | undefined
  /** The timeout of an `exec` that names none. */
  readonly execTimeoutMs: number
  readonly emit: (event: SandboxEvent) => void
  readonly onDestroyed: (sandbox: ManagedSandbox) => void
}

/**
 * The sandbox a provider hands out: the backend's sandbox plus what the
 * provider owns for every backend, namely the default exec timeout, the
 * lifetime timer, the `busy` status while commands run, destroy events, and
 * the provider's record of live sandboxes.
 */
export class ManagedSandbox implements CordonSandbox {
  readonly setNetworkPolicy?: (
    policy: SandboxNetworkPolicy,
    options?: SandboxFileOptions,
  ) => Promise<void>
  readonly writeFiles?: (
    files: readonly SandboxFileWrite[],
    options?: SandboxFileOptions,
  ) => Promise<void>
  readonly readFiles?: (
    dir?: string,
    options?: SandboxReadFileOptions,
  ) => Promise<AsyncIterable<SandboxFileContent>>
  readonly forwardPort?: (
    port: number,
    options?: SandboxPortForwardOptions,
  ) => Promise<SandboxPortForward>
  private expiry: ReturnType<typeof setTimeout> | undefined
  private destroying: Promise<void> | undefined
  /** Commands started through this sandbox that have not ended. */
  private running = 0

  constructor(
    private readonly inner: CordonSandbox,
    private readonly hooks: ManagedSandboxHooks,
  ) {
    if (inner.setNetworkPolicy) {
      const set = inner.setNetworkPolicy.bind(inner)
      this.setNetworkPolicy = (policy, options) => set(policy, options)
    }
    if (inner.writeFiles) {
      const write = inner.writeFiles.bind(inner)
      this.writeFiles = (files, options) => write(files, options)
    }
    if (inner.forwardPort) {
      const forward = inner.forwardPort.bind(inner)
      this.forwardPort = (port, options) => forward(port, options)
    }
    if (inner.readFiles) {
      const read = inner.readFiles.bind(inner)
      this.readFiles = (dir, options) => read(dir, options)
    }
    if (hooks.lifetimeMs !== undefined) {
      this.expiry = setTimeout(() => {
        hooks.emit({
          type: 'lifecycle',
          phase: 'expired',
          sandboxId: inner.id,
          backend: hooks.backend,
          timestamp: Date.now(),
        })
        void this.destroy().catch(() => {})
      }, hooks.lifetimeMs)
      this.expiry.unref?.()
    }
  }

  get id(): SandboxId {
    return this.inner.id
  }

  get status(): SandboxStatus {
    const status = this.inner.status
    return status === 'ready' && this.running > 0 ? 'busy' : status
  }

  get rootDir(): string {
    return this.inner.rootDir
  }

  get environment(): SandboxEnvironment {
    return this.inner.environment
  }

  async exec(
    command: string,
    args?: readonly string[],
    options: SandboxExecOptions = {},
  ): Promise<SandboxExecResult> {
    this.running++
    try {
      return await this.inner.exec(command, args, {
        ...options,
        timeout: options.timeout ?? this.hooks.execTimeoutMs,
      })
    } finally {
      this.running--
    }
  }

  async start(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<SandboxProcess> {
    const process = await this.inner.start(command, args, options)
    this.running++
    let counted = true
    const settle = (): void => {
      if (counted) this.running--
      counted = false
    }
    process.wait().then(settle, settle)
    return process
  }

  writeFile(
    path: string,
    content: string | Uint8Array,
    options?: SandboxWriteFileOptions,
  ): Promise<void> {
    return this.inner.writeFile(path, content, options)
  }

  readFile(path: string, options?: SandboxReadFileOptions): Promise<Buffer> {
    return this.inner.readFile(path, options)
  }

  writeFileStream(
    path: string,
    source: SandboxByteSource,
    options?: SandboxWriteFileOptions,
  ): Promise<void> {
    return this.inner.writeFileStream(path, source, options)
  }

  readFileStream(path: string, options?: SandboxFileOptions): Promise<AsyncIterable<Uint8Array>> {
    return this.inner.readFileStream(path, options)
  }

  listFiles(rootPath?: string, options?: SandboxFileOptions): Promise<readonly SandboxFileEntry[]> {
    return this.inner.listFiles(rootPath, options)
  }

  destroy(options?: SandboxDestroyOptions): Promise<void> {
    if (this.expiry) clearTimeout(this.expiry)
    this.destroying ??= this.runDestroy(options)
    return this.destroying
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.destroy()
  }

  private async runDestroy(options: SandboxDestroyOptions | undefined): Promise<void> {
    const { emit, backend } = this.hooks
    const started = performance.now()
    emit({
      type: 'lifecycle',
      phase: 'destroy.start',
      sandboxId: this.id,
      backend,
      timestamp: Date.now(),
    })
    try {
      await this.inner.destroy(options)
    } catch (error) {
      // Let a later call try again.
      this.destroying = undefined
      throw error
    }
    this.hooks.onDestroyed(this)
    emit({
      type: 'lifecycle',
      phase: 'destroy.end',
      sandboxId: this.id,
      backend,
      timestamp: Date.now(),
      durationMs: performance.now() - started,
    })
  }
}
