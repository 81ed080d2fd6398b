import { Buffer } from 'node:buffer'
import { posix } from 'node:path'
import {
  HarnessCapabilityUnsupportedError,
  type HarnessV1NetworkPolicy,
  type HarnessV1NetworkSandboxSession,
  type HarnessV1PortEndpoint,
} from '@ai-sdk/harness'
import {
  type Sandbox,
  type SandboxExecResult,
  SandboxFileNotFoundError,
  type SandboxPortForward,
} from '@cordon/core'
import type { SandboxProcessHandle, SandboxSessionView } from './harness-types.js'
import { applyNetworkPolicy } from './network-policy.js'
import { spawnProcess } from './spawned-process.js'

type PortProtocol = 'http' | 'https' | 'ws'

/**
 * A harness network sandbox session over one cordon sandbox. Files, commands
 * and processes go through cordon's sandbox API; ports through cordon's port
 * forwarding; network policy through cordon's enforced egress. What the
 * backend cannot do raises the harness's `HarnessCapabilityUnsupportedError`
 * from the method that needs it; nothing is accepted and ignored.
 *
 * `setRequestTransformations` and `addRequestTransformations` are absent:
 * cordon injects credentials outside the sandbox only as brokered
 * credentials fixed when the provider is made, not as rules changed at run
 * time, and the harness contract asks providers without that to omit them.
 */
export class CordonHarnessSession implements HarnessV1NetworkSandboxSession {
  readonly id: string
  readonly sandbox: Sandbox
  readonly #providerId: string
  readonly #onDestroyed: () => void
  #ports: number[]
  readonly #forwards = new Map<number, Promise<SandboxPortForward>>()

  constructor(options: {
    id: string
    sandbox: Sandbox
    providerId: string
    ports: readonly number[]
    onDestroyed: () => void
  }) {
    this.id = options.id
    this.sandbox = options.sandbox
    this.#providerId = options.providerId
    this.#ports = [...new Set(options.ports)]
    this.#onDestroyed = options.onDestroyed
  }

  get defaultWorkingDirectory(): string {
    return this.sandbox.rootDir
  }

  get ports(): ReadonlyArray<number> {
    return this.#ports
  }

  get description(): string {
    const ports =
      this.#ports.length > 0
        ? ` Ports reachable from the host: ${this.#ports.join(', ')} (serve on 127.0.0.1 or 0.0.0.0).`
        : ''
    return `A cordon sandbox (${this.#providerId}). The working directory is ${this.sandbox.rootDir}; it and /tmp are writable, the rest of the filesystem is read-only. Commands run through sh as an unprivileged user, with memory, process and CPU limits. Network access is only what the sandbox's egress policy allows.${ports}`
  }

  readonly readFile = async (options: {
    path: string
    abortSignal?: AbortSignal
  }): Promise<ReadableStream<Uint8Array> | null> => {
    options.abortSignal?.throwIfAborted()
    if (!this.sandbox.readFileStream) {
      const bytes = await this.readBinaryFile(options)
      return bytes === null ? null : singleChunkStream(bytes)
    }
    const signal = options.abortSignal
    return await nullIfMissing(this.sandbox, options.path, async () => {
      const chunks = (await this.sandbox.readFileStream!(options.path, signal ? { signal } : {}))[
        Symbol.asyncIterator
      ]()
      // The first chunk is read here so that a missing file resolves to null
      // rather than failing the stream later.
      const first = await chunks.next()
      return new ReadableStream<Uint8Array>({
        start(controller) {
          if (first.done) controller.close()
          else controller.enqueue(first.value)
        },
        async pull(controller) {
          if (first.done) return
          const next = await chunks.next()
          if (next.done) controller.close()
          else controller.enqueue(next.value)
        },
        async cancel() {
          await chunks.return?.()
        },
      })
    })
  }

  readonly readBinaryFile = async (options: {
    path: string
    abortSignal?: AbortSignal
  }): Promise<Uint8Array | null> => {
    options.abortSignal?.throwIfAborted()
    const signal = options.abortSignal
    return await nullIfMissing(this.sandbox, options.path, async () => {
      const bytes = await this.sandbox.readFile(options.path, signal ? { signal } : {})
      return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    })
  }

  readonly readTextFile = async (options: {
    path: string
    abortSignal?: AbortSignal
    encoding?: string
    startLine?: number
    endLine?: number
  }): Promise<string | null> => {
    const bytes = await this.readBinaryFile(options)
    if (bytes === null) return null
    const text = new TextDecoder(options.encoding ?? 'utf-8').decode(bytes)
    if (options.startLine === undefined && options.endLine === undefined) return text
    // 1-based and inclusive; each line keeps its newline, an end past EOF reads through EOF.
    const lines = text.split(/(?<=\n)/)
    return lines.slice((options.startLine ?? 1) - 1, options.endLine ?? lines.length).join('')
  }

  readonly writeFile = async (options: {
    path: string
    content: ReadableStream<Uint8Array>
    abortSignal?: AbortSignal
  }): Promise<void> => {
    options.abortSignal?.throwIfAborted()
    const signal = options.abortSignal ? { signal: options.abortSignal } : {}
    if (this.sandbox.writeFileStream) {
      await this.sandbox.writeFileStream(options.path, options.content, signal)
      return
    }
    const bytes = new Uint8Array(await new Response(options.content).arrayBuffer())
    await this.sandbox.writeFile(options.path, bytes, signal)
  }

  readonly writeBinaryFile = async (options: {
    path: string
    content: Uint8Array
    abortSignal?: AbortSignal
  }): Promise<void> => {
    options.abortSignal?.throwIfAborted()
    const signal = options.abortSignal ? { signal: options.abortSignal } : {}
    await this.sandbox.writeFile(options.path, options.content, signal)
  }

  readonly writeTextFile = async (options: {
    path: string
    content: string
    encoding?: string
    abortSignal?: AbortSignal
  }): Promise<void> => {
    const encoding = (options.encoding ?? 'utf-8').toLowerCase()
    if (encoding !== 'utf-8' && encoding !== 'utf8' && !Buffer.isEncoding(encoding)) {
      throw new HarnessCapabilityUnsupportedError({
        message: `cannot encode text as "${options.encoding}": use utf-8 or one of Node's Buffer encodings`,
      })
    }
    await this.writeBinaryFile({
      path: options.path,
      content: Buffer.from(options.content, encoding as BufferEncoding),
      ...(options.abortSignal ? { abortSignal: options.abortSignal } : {}),
    })
  }

  readonly spawn = async (options: {
    command: string
    workingDirectory?: string
    env?: Record<string, string>
    abortSignal?: AbortSignal
  }): Promise<SandboxProcessHandle> =>
    await spawnProcess(this.sandbox, {
      command: options.command,
      cwd: this.#cwd(options.workingDirectory),
      env: options.env,
      abortSignal: options.abortSignal,
    })

  readonly run = async (options: {
    command: string
    workingDirectory?: string
    env?: Record<string, string>
    abortSignal?: AbortSignal
  }): Promise<{ exitCode: number; stdout: string; stderr: string }> => {
    options.abortSignal?.throwIfAborted()
    const cwd = this.#cwd(options.workingDirectory)
    const result = await this.sandbox.exec('sh', ['-c', options.command], {
      ...(cwd ? { cwd } : {}),
      ...(options.env ? { env: options.env } : {}),
      ...(options.abortSignal ? { signal: options.abortSignal } : {}),
    })
    if (result.aborted && options.abortSignal?.aborted) throw options.abortSignal.reason
    return { exitCode: result.exitCode, stdout: result.stdout, stderr: withEndNotes(result) }
  }

  /**
   * The host endpoint of an exposed port, through cordon's port forwarding:
   * a listener on the host's loopback whose connections reach the port on the
   * sandbox's loopback. Plain TCP only, so `https` is refused.
   */
  readonly getPortEndpoint = async (options: {
    port: number
    protocol?: PortProtocol
  }): Promise<HarnessV1PortEndpoint> => {
    const protocol = options.protocol ?? 'http'
    if (protocol === 'https') {
      throw new HarnessCapabilityUnsupportedError({
        message:
          'cordon forwards ports as plain TCP to the host loopback; there is no TLS endpoint (use http or ws)',
      })
    }
    if (!this.#ports.includes(options.port)) {
      throw new HarnessCapabilityUnsupportedError({
        message: `port ${options.port} is not exposed by this sandbox (exposed: ${this.#ports.join(', ') || 'none'}); add it with setPorts or the provider's ports option`,
      })
    }
    const forward = await this.#forward(options.port)
    return { url: `${protocol}://${forward.host}:${forward.port}` }
  }

  readonly getPortUrl = async (options: { port: number; protocol?: PortProtocol }) =>
    (await this.getPortEndpoint(options)).url

  /** Full replacement: forwards of ports left out are closed, new ones are opened now. */
  readonly setPorts = async (
    ports: ReadonlyArray<number>,
    options?: { abortSignal?: AbortSignal },
  ): Promise<void> => {
    options?.abortSignal?.throwIfAborted()
    this.#forwardPort()
    const next = [...new Set(ports)]
    for (const [port, forward] of this.#forwards) {
      if (next.includes(port)) continue
      this.#forwards.delete(port)
      await forward.then((opened) => opened.close()).catch(() => {})
    }
    this.#ports = next
    await Promise.all(next.map((port) => this.#forward(port)))
  }

  readonly setNetworkPolicy = async (policy: HarnessV1NetworkPolicy): Promise<void> => {
    await applyNetworkPolicy(this.sandbox, policy)
  }

  /** cordon has no stopped-but-kept state: stopping removes the sandbox. Idempotent. */
  readonly stop = async (): Promise<void> => {
    this.#onDestroyed()
    await this.sandbox.destroy()
  }

  readonly destroy = async (): Promise<void> => {
    await this.stop()
  }

  readonly restricted = (): SandboxSessionView => ({
    description: this.description,
    readFile: this.readFile,
    readBinaryFile: this.readBinaryFile,
    readTextFile: this.readTextFile,
    writeFile: this.writeFile,
    writeBinaryFile: this.writeBinaryFile,
    writeTextFile: this.writeTextFile,
    spawn: this.spawn,
    run: this.run,
  })

  #cwd(workingDirectory: string | undefined): string | undefined {
    return workingDirectory === undefined
      ? undefined
      : posix.resolve(this.sandbox.rootDir, workingDirectory)
  }

  #forwardPort(): NonNullable<Sandbox['forwardPort']> {
    const forwardPort = this.sandbox.forwardPort?.bind(this.sandbox)
    if (!forwardPort) {
      throw new HarnessCapabilityUnsupportedError({
        message: `this cordon backend (${this.#providerId}) cannot forward ports: its channel to the sandbox carries no connections`,
      })
    }
    return forwardPort
  }

  #forward(port: number): Promise<SandboxPortForward> {
    let forward = this.#forwards.get(port)
    if (!forward) {
      forward = this.#forwardPort()(port)
      this.#forwards.set(port, forward)
      forward.catch(() => this.#forwards.delete(port))
    }
    return forward
  }
}

/**
 * The harness's reads resolve to null only when the file does not exist.
 * cordon reports a directory (or another non-file) with the same error as a
 * missing file, so the path is looked at before answering null: what exists
 * is refused with cordon's error, which names the path and what is there.
 */
async function nullIfMissing<T>(
  sandbox: Sandbox,
  path: string,
  read: () => Promise<T>,
): Promise<T | null> {
  try {
    return await read()
  } catch (error) {
    if (!SandboxFileNotFoundError.isInstance(error)) throw error
    const exists = await sandbox.exec('test', ['-e', path], { cwd: sandbox.rootDir })
    if (exists.exitCode === 0) throw error
    return null
  }
}

function singleChunkStream(bytes: Uint8Array): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      controller.enqueue(bytes)
      controller.close()
    },
  })
}

/**
 * The harness's result has only an exit code (137 after cordon's SIGKILL), so
 * why cordon ended a command, and that it cut a stream at its output cap
 * (otherwise a cut output looks complete), is said where the caller (often a
 * model) reads: last lines of stderr.
 */
function withEndNotes(result: SandboxExecResult): string {
  const notes = [
    result.timedOut
      ? `cordon: the command was killed when it reached the sandbox's exec timeout (${Math.round(result.durationMs)} ms)`
      : '',
    result.oomKilled ? 'cordon: the sandbox ran out of memory while the command ran' : '',
    result.stdoutTruncated ? truncationNote('stdout', result.stdout) : '',
    result.stderrTruncated ? truncationNote('stderr', result.stderr) : '',
  ].filter(Boolean)
  if (notes.length === 0) return result.stderr
  const separator = result.stderr === '' || result.stderr.endsWith('\n') ? '' : '\n'
  return `${result.stderr}${separator}${notes.join('\n')}\n`
}

function truncationNote(stream: 'stdout' | 'stderr', kept: string): string {
  return `cordon: ${stream} was cut at the sandbox's output cap; only its first ${Buffer.byteLength(kept)} bytes are shown`
}
