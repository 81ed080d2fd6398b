import type { SandboxNetworkPolicyUpdate } from './egress-policy.js'
import type { SandboxEvent } from './events.js'
import type {
  Sandbox,
  SandboxByteSource,
  SandboxDestroyOptions,
  SandboxExecOptions,
  SandboxExecResult,
  SandboxFileContent,
  SandboxFileEntry,
  SandboxFileOptions,
  SandboxFileWrite,
  SandboxProcess,
  SandboxStartOptions,
  SandboxStatus,
  SandboxWriteFileOptions,
} from './sandbox.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * The sandbox a provider hands out: the backend's sandbox plus what the
 * provider owns for every backend, namely the lifetime timer, destroy events
 * and the provider's record of live sandboxes.
 */
export class ManagedSandbox implements Sandbox {
  readonly setNetworkPolicy?: (
    update: SandboxNetworkPolicyUpdate,
    options?: SandboxFileOptions,
  ) => Promise<void>
  readonly writeFiles?: (
    files: readonly SandboxFileWrite[],
    options?: SandboxFileOptions,
  ) => Promise<void>
  readonly readFiles?: (
    dir?: string,
    options?: SandboxFileOptions,
  ) => Promise<AsyncIterable<SandboxFileContent>>
  private expiry: ReturnType<typeof setTimeout> | undefined
  private destroying: Promise<void> | undefined

  constructor(
    private readonly inner: Sandbox,
    private readonly hooks: {
      readonly backend: string
      readonly lifetimeMs: number | undefined
      readonly emit: (event: SandboxEvent) => void
      readonly onDestroyed: (sandbox: ManagedSandbox) => void
    },
  ) {
    if (inner.setNetworkPolicy) {
      const set = inner.setNetworkPolicy.bind(inner)
      this.setNetworkPolicy = (update, options) => set(update, options)
    }
    if (inner.writeFiles) {
      const write = inner.writeFiles.bind(inner)
      this.writeFiles = (files, options) => write(files, options)
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
    return this.inner.status
  }

  get rootDir(): string {
    return this.inner.rootDir
  }

  exec(
    command: string,
    args?: readonly string[],
    options?: SandboxExecOptions,
  ): Promise<SandboxExecResult> {
    return this.inner.exec(command, args, options)
  }

  start(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<SandboxProcess> {
    return this.inner.start(command, args, options)
  }

  writeFile(
    path: string,
    content: string | Uint8Array,
    options?: SandboxWriteFileOptions,
  ): Promise<void> {
    return this.inner.writeFile(path, content, options)
  }

  readFile(path: string, options?: SandboxFileOptions): Promise<Uint8Array> {
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

  listFiles(dir?: string, options?: SandboxFileOptions): Promise<SandboxFileEntry[]> {
    return this.inner.listFiles(dir, options)
  }

  destroy(options?: SandboxDestroyOptions): Promise<void> {
    if (this.expiry) clearTimeout(this.expiry)
    this.destroying ??= this.runDestroy(options)
    return this.destroying
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
