import type { Duplex } from 'node:stream'
import { Writable } from 'node:stream'
import type { SandboxExecResult, SandboxOutputChunk } from '@cordon/core'
import { ExecOutputCollector, newSandboxId } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { EXEC_TAG_VARIABLE, killExecTree } from './process-tree-kill.js'

export interface ExecSessionOptions {
  readonly docker: Docker
  readonly container: Docker.Container
  readonly user: string
  readonly command: string
  readonly args: readonly string[]
  readonly env: Readonly<Record<string, string>>
  readonly cwd: string
  /** `none`: stdin is empty; `open`: the caller writes and closes it. */
  readonly stdin: 'none' | 'open'
  readonly timeoutMs: number | undefined
  readonly signal: AbortSignal | undefined
  readonly maxOutputBytes: number | undefined
  readonly onOutput: ((chunk: SandboxOutputChunk) => void) | undefined
  /** Tells an OOM kill apart from other SIGKILLs. */
  readonly wasOomKilled: (sinceMs: number) => Promise<boolean>
  /** Subscribes to the container stopping; returns the unsubscribe function. */
  readonly onContainerDeath: (listener: () => void) => () => void
  /** Whether the engine recorded an OOM kill of the whole container. */
  readonly containerOomKilled: () => Promise<boolean>
  /** Called when the exec ended because the container went away. */
  readonly containerGone: () => Error
}

type EndReason = 'timeout' | 'abort' | 'kill'

/** How long to wait for an exec's stream to end after a kill before killing again. */
const KILL_RETRY_MS = 2000
const KILL_ATTEMPTS = 5

/**
 * One command run through the Engine exec API: argv, env and cwd as given,
 * stdout and stderr demultiplexed and decoded as they arrive, stdin written on
 * request, the exit code read back from the engine, and a kill that takes the
 * whole process tree with it. There is no idle limit: a quiet command runs
 * until it ends, its timeout passes or its signal aborts.
 */
export class ExecSession {
  private readonly collector: ExecOutputCollector
  private readonly tag = newSandboxId().slice(4)
  private readonly startedAt = Date.now()
  private readonly startedPerf = performance.now()
  private stream: Duplex | undefined
  private exec: Docker.Exec | undefined
  private endReason: EndReason | undefined
  private killing: Promise<void> | undefined
  private timer: ReturnType<typeof setTimeout> | undefined
  private removeAbort: () => void = () => {}
  private removeDeathListener: () => void = () => {}
  private containerDied = false
  private result: Promise<SandboxExecResult> | undefined

  private constructor(private readonly options: ExecSessionOptions) {
    this.collector = new ExecOutputCollector({
      maxOutputBytes: options.maxOutputBytes,
      onOutput: options.onOutput,
    })
  }

  static async start(options: ExecSessionOptions): Promise<ExecSession> {
    const session = new ExecSession(options)
    await session.begin()
    return session
  }

  private async begin(): Promise<void> {
    const { container, options } = { container: this.options.container, options: this.options }
    this.exec = await container.exec({
      Cmd: [options.command, ...options.args],
      Env: [
        ...Object.entries(options.env).map(([key, value]) => `${key}=${value}`),
        `${EXEC_TAG_VARIABLE}=${this.tag}`,
      ],
      WorkingDir: options.cwd,
      User: options.user,
      AttachStdin: options.stdin === 'open',
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      Privileged: false,
    })
    const stream = (await this.exec.start({
      hijack: true,
      stdin: options.stdin === 'open',
    })) as Duplex
    this.stream = stream
    const sink = (name: 'stdout' | 'stderr') =>
      new Writable({
        write: (chunk: Buffer, _encoding, callback) => {
          this.collector.push(name, chunk)
          callback()
        },
      })
    options.docker.modem.demuxStream(stream, sink('stdout'), sink('stderr'))
    const ended = new Promise<void>((resolve) => {
      stream.on('end', resolve)
      stream.on('close', resolve)
      stream.on('error', () => resolve())
    })
    this.removeDeathListener = options.onContainerDeath(() => {
      this.containerDied = true
      stream.destroy()
    })
    this.result = ended.then(() => this.finish())
    // The caller may never await the result (a fire-and-forget background process).
    this.result.catch(() => {})
    if (options.timeoutMs !== undefined) {
      this.timer = setTimeout(() => void this.kill('timeout'), options.timeoutMs)
    }
    if (options.signal) {
      const onAbort = () => void this.kill('abort')
      if (options.signal.aborted) onAbort()
      else {
        options.signal.addEventListener('abort', onAbort, { once: true })
        this.removeAbort = () => options.signal?.removeEventListener('abort', onAbort)
      }
    }
  }

  async write(data: string | Uint8Array): Promise<void> {
    const stream = this.stream
    if (!stream || stream.writableEnded) throw new Error('stdin is closed')
    await new Promise<void>((resolve, reject) =>
      stream.write(data, (error) => (error ? reject(error) : resolve())),
    )
  }

  async closeStdin(): Promise<void> {
    const stream = this.stream
    if (!stream || stream.writableEnded) return
    await new Promise<void>((resolve) => stream.end(resolve))
  }

  /** Kills the exec's whole process tree; repeats if the exec is still running afterwards. */
  kill(reason: EndReason): Promise<void> {
    this.endReason ??= reason
    this.killing ??= (async () => {
      for (let attempt = 0; attempt < KILL_ATTEMPTS; attempt++) {
        await killExecTree(this.options.container, this.options.user, this.tag).catch(() => {})
        const done = await Promise.race([
          this.result!.then(
            () => true,
            () => true,
          ),
          new Promise<boolean>((resolve) => setTimeout(() => resolve(false), KILL_RETRY_MS)),
        ])
        if (done) return
      }
    })()
    return this.killing
  }

  wait(): Promise<SandboxExecResult> {
    return this.result!
  }

  /**
   * The container stopped while the command ran. The engine cannot report the
   * exec's own exit code then, so it is -1 (unknown); an OOM kill of the
   * container is still reported.
   */
  private async finishAfterContainerDeath(): Promise<SandboxExecResult> {
    const oomKilled = await this.options.containerOomKilled()
    if (!oomKilled) throw this.options.containerGone()
    return {
      exitCode: -1,
      ...this.collector.finish(),
      signal: 'SIGKILL',
      timedOut: this.endReason === 'timeout',
      aborted: this.endReason === 'abort',
      oomKilled: true,
      durationMs: Math.round(performance.now() - this.startedPerf),
    }
  }

  private async finish(): Promise<SandboxExecResult> {
    if (this.timer) clearTimeout(this.timer)
    this.removeAbort()
    this.removeDeathListener()
    if (this.containerDied) return this.finishAfterContainerDeath()
    let exitCode = -1
    try {
      // The stream can end a moment before the engine records the exit code.
      for (let attempt = 0; attempt < 100; attempt++) {
        const info = await this.exec!.inspect()
        if (!info.Running) {
          exitCode = typeof info.ExitCode === 'number' ? info.ExitCode : -1
          break
        }
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) throw this.options.containerGone()
      throw error
    }
    if (this.containerDied) return this.finishAfterContainerDeath()
    const output = this.collector.finish()
    const killedByUs = this.endReason !== undefined
    const oomKilled =
      exitCode === 137 && !killedByUs ? await this.options.wasOomKilled(this.startedAt) : false
    return {
      exitCode,
      ...output,
      ...(killedByUs || oomKilled ? { signal: 'SIGKILL' } : {}),
      timedOut: this.endReason === 'timeout',
      aborted: this.endReason === 'abort',
      oomKilled,
      durationMs: Math.round(performance.now() - this.startedPerf),
    }
  }
}
