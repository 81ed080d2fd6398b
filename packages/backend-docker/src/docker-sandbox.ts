import {
  type CordonSandbox,
  type ResolvedContainerSandboxLayout,
  type SandboxByteSource,
  SandboxControlRefusedError,
  SandboxDestroyedError,
  type SandboxDestroyOptions,
  type SandboxEnvironment,
  type SandboxExecOptions,
  type SandboxExecResult,
  type SandboxFileContent,
  type SandboxFileEntry,
  type SandboxFileOptions,
  type SandboxFileWrite,
  type SandboxId,
  type SandboxNetworkPolicy,
  type SandboxProcess,
  type SandboxStartOptions,
  type SandboxStatus,
  type SandboxWriteFileOptions,
} from '@cordon/core'
import {
  readableRoots,
  throwIfAborted,
  validateExecRequest,
  writableRoots,
} from '@cordon/core/backend'
import type Docker from 'dockerode'
import { ArchiveFiles, type FileOwner } from './archive-files.js'
import { translateEngineError } from './engine-errors.js'
import type { EngineEvents } from './engine-events.js'
import { ExecSession } from './exec-session.js'
import type { SandboxEgress } from './sandbox-egress.js'
import { resolveSandboxPath } from './sandbox-paths.js'

export interface DockerSandboxParts {
  readonly id: SandboxId
  readonly backend: string
  readonly endpoint: string
  readonly docker: Docker
  readonly container: Docker.Container
  readonly user: string
  readonly owner: FileOwner
  readonly layout: ResolvedContainerSandboxLayout
  readonly workingDirectory: string
  /** Timeout of an exec that names none, in ms. */
  readonly execTimeoutMs: number
  readonly events: EngineEvents
  /** The sandbox's registration at the egress gateway; absent under `deny-all`. */
  readonly egress: SandboxEgress | undefined
  /** Removes the container and everything made for it; must tolerate things already gone. */
  readonly remove: () => Promise<void>
}

/** A sandbox backed by one hardened container. */
export class DockerSandbox implements CordonSandbox {
  readonly id: SandboxId
  readonly rootDir: string
  readonly environment: SandboxEnvironment = 'linux-namespace'
  private currentStatus: 'ready' | 'destroying' | 'failed' | 'destroyed' = 'ready'
  private readonly writable: readonly string[]
  private readonly readable: readonly string[]
  private destroying: Promise<void> | undefined
  private readonly files: ArchiveFiles
  private readonly live = new Set<ExecSession>()

  constructor(private readonly parts: DockerSandboxParts) {
    this.id = parts.id
    this.rootDir = parts.layout.outputs.containerPath
    this.writable = writableRoots(parts.layout)
    this.readable = readableRoots(parts.layout)
    this.files = new ArchiveFiles(parts.container, parts.owner)
    // A container that stops on its own (under gVisor, an out-of-memory kill
    // ends the whole sandbox) leaves a sandbox that can run nothing more.
    parts.events.onDeath(parts.container.id, () => {
      if (this.currentStatus === 'ready') this.currentStatus = 'failed'
    })
  }

  /** Whether the engine recorded an OOM kill of the container itself. */
  private async containerOomKilled(): Promise<boolean> {
    try {
      return (await this.parts.container.inspect()).State.OOMKilled === true
    } catch {
      return false
    }
  }

  get status(): SandboxStatus {
    if (this.currentStatus !== 'ready') return 'destroyed'
    return this.live.size > 0 ? 'busy' : 'ready'
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.destroy()
  }

  async exec(
    command: string,
    args: readonly string[] = [],
    options: SandboxExecOptions = {},
  ): Promise<SandboxExecResult> {
    validateExecRequest(command, args, options)
    const session = await this.startSession(
      command,
      args,
      { ...options, timeout: options.timeout ?? this.parts.execTimeoutMs },
      options.stdin !== undefined ? 'open' : 'none',
    )
    if (options.stdin !== undefined) {
      try {
        await session.write(options.stdin)
      } catch {
        // The command may exit without reading its input; its result still stands.
      }
      await session.closeStdin()
    }
    return this.awaitSession(session)
  }

  async start(
    command: string,
    args: readonly string[] = [],
    options: SandboxStartOptions = {},
  ): Promise<SandboxProcess> {
    validateExecRequest(command, args, options)
    const openStdin = options.openStdin ?? true
    const session = await this.startSession(command, args, options, openStdin ? 'open' : 'none')
    const result = this.awaitSession(session)
    result.catch(() => {})
    let ended = false
    result.then(
      () => {
        ended = true
      },
      () => {
        ended = true
      },
    )
    return {
      write: (data) => session.write(data),
      closeStdin: () => session.closeStdin(),
      kill: () => session.kill('kill'),
      wait: () => result,
      [Symbol.asyncDispose]: async () => {
        if (ended) return
        await session.kill('kill').catch(() => {})
        await result.catch(() => {})
      },
    }
  }

  private async startSession(
    command: string,
    args: readonly string[],
    options: SandboxExecOptions | SandboxStartOptions,
    stdin: 'none' | 'open',
  ): Promise<ExecSession> {
    this.assertUsable()
    throwIfAborted(options.signal, 'exec')
    try {
      const session = await ExecSession.start({
        docker: this.parts.docker,
        container: this.parts.container,
        user: this.parts.user,
        command,
        args,
        env: options.env ?? {},
        cwd: options.cwd ?? this.parts.workingDirectory,
        stdin,
        timeoutMs: options.timeout,
        signal: options.signal,
        maxOutputBytes: options.maxOutputBytes,
        onOutput: options.onOutput,
        wasOomKilled: (since) => this.parts.events.oomSince(this.parts.container.id, since, 1000),
        onContainerDeath: (listener) =>
          this.parts.events.onDeath(this.parts.container.id, listener),
        containerOomKilled: () => this.containerOomKilled(),
        containerGone: () => new SandboxDestroyedError(this.id),
      })
      this.live.add(session)
      return session
    } catch (error) {
      throw this.translate(error, 'exec')
    }
  }

  private async awaitSession(session: ExecSession): Promise<SandboxExecResult> {
    try {
      return await session.wait()
    } catch (error) {
      throw this.translate(error, 'exec')
    } finally {
      this.live.delete(session)
    }
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: SandboxWriteFileOptions = {},
  ): Promise<void> {
    const bytes = typeof content === 'string' ? new TextEncoder().encode(content) : content
    await this.fileOperation('writeFile', options.signal, async () => {
      const target = resolveSandboxPath(path, this.rootDir, this.writable, 'write')
      await this.files.write(target, bytes, options)
    })
  }

  async writeFileStream(
    path: string,
    source: SandboxByteSource,
    options: SandboxWriteFileOptions = {},
  ): Promise<void> {
    await this.fileOperation('writeFileStream', options.signal, async () => {
      const target = resolveSandboxPath(path, this.rootDir, this.writable, 'write')
      await this.files.write(target, source, options)
    })
  }

  async readFile(path: string, options: SandboxFileOptions = {}): Promise<Buffer> {
    return this.fileOperation('readFile', options.signal, async () => {
      const target = resolveSandboxPath(path, this.rootDir, this.readable, 'read')
      const chunks: Uint8Array[] = []
      for await (const chunk of await this.files.read(target, options.signal)) chunks.push(chunk)
      return Buffer.concat(chunks)
    })
  }

  async readFileStream(
    path: string,
    options: SandboxFileOptions = {},
  ): Promise<AsyncIterable<Uint8Array>> {
    return this.fileOperation('readFileStream', options.signal, async () => {
      const target = resolveSandboxPath(path, this.rootDir, this.readable, 'read')
      return this.files.read(target, options.signal)
    })
  }

  async listFiles(dir?: string, options: SandboxFileOptions = {}): Promise<SandboxFileEntry[]> {
    return this.fileOperation('listFiles', options.signal, async () => {
      const target = resolveSandboxPath(dir ?? this.rootDir, this.rootDir, this.readable, 'read')
      return this.files.list(target, options.signal)
    })
  }

  /** Many small files as one archive per mount; see `Sandbox.writeFiles`. */
  async writeFiles(
    files: readonly SandboxFileWrite[],
    options: SandboxFileOptions = {},
  ): Promise<void> {
    await this.fileOperation('writeFiles', options.signal, async () => {
      const resolved = files.map((file) => ({
        target: resolveSandboxPath(file.path, this.rootDir, this.writable, 'write'),
        content:
          typeof file.content === 'string' ? new TextEncoder().encode(file.content) : file.content,
        mode: file.mode,
      }))
      await this.files.writeMany(resolved, options.signal)
    })
  }

  /** Every file under `dir` with its bytes, from one archive; see `Sandbox.readFiles`. */
  async readFiles(
    dir?: string,
    options: SandboxFileOptions = {},
  ): Promise<AsyncIterable<SandboxFileContent>> {
    return this.fileOperation('readFiles', options.signal, async () => {
      const target = resolveSandboxPath(dir ?? this.rootDir, this.rootDir, this.readable, 'read')
      return this.files.readMany(target, options.signal)
    })
  }

  /**
   * Replaces the allowlist at the gateway for the sandbox's new connections.
   * A sandbox created under `deny-all` has no gateway and no network: refused.
   */
  async setNetworkPolicy(update: SandboxNetworkPolicy): Promise<void> {
    this.assertUsable()
    if (this.parts.egress) {
      await this.parts.egress.setAllowedHosts(update)
      return
    }
    throw new SandboxControlRefusedError(
      'setNetworkPolicy',
      this.parts.backend,
      'this sandbox was created with egress "deny-all": it has no network and no egress gateway to reconfigure',
    )
  }

  destroy(options: SandboxDestroyOptions = {}): Promise<void> {
    throwIfAborted(options.signal, 'destroy')
    this.destroying ??= this.runDestroy()
    return this.destroying
  }

  private async runDestroy(): Promise<void> {
    this.currentStatus = 'destroying'
    try {
      await this.parts.remove()
    } catch (error) {
      this.currentStatus = 'failed'
      this.destroying = undefined
      throw this.translate(error, 'destroy')
    }
    this.parts.events.forget(this.parts.container.id)
    this.currentStatus = 'destroyed'
  }

  private async fileOperation<T>(
    operation: string,
    signal: AbortSignal | undefined,
    run: () => Promise<T>,
  ): Promise<T> {
    this.assertUsable()
    throwIfAborted(signal, operation)
    try {
      return await run()
    } catch (error) {
      throw this.translate(error, operation)
    }
  }

  private assertUsable(): void {
    if (this.currentStatus !== 'ready') throw new SandboxDestroyedError(this.id)
  }

  private translate(error: unknown, operation: string): Error {
    if (this.currentStatus !== 'ready') return new SandboxDestroyedError(this.id, { cause: error })
    return translateEngineError(error, this.parts.backend, this.parts.endpoint, operation)
  }
}
