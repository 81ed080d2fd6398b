import {
  SandboxDestroyedError,
  type SandboxExecResult,
  SandboxOperationError,
  type SandboxProcess,
} from '@cordon/core'
import type { ExecOutputCollector } from '@cordon/core/backend'
import { type AgentExecSession, AgentStdinClosedError } from '../protocol/index.js'
import type { AgentClient } from './agent-client.js'

const textEncoder = new TextEncoder()

/**
 * How a handle's following of its command ended: with the command's result,
 * detached by the host (the command runs on), or failed with the error
 * `wait()` rejects with.
 */
export type AgentProcessEnding =
  | { readonly result: SandboxExecResult }
  | { readonly detached: true }
  | { readonly error: unknown }

export interface AgentProcessHooks {
  readonly sandboxId: string
  readonly client: AgentClient
  readonly isDestroyed: () => boolean
  readonly onSettled: (ending: AgentProcessEnding) => void
  /**
   * When the command's connection fails: how the command ended, if the
   * backend knows (the whole sandbox was killed for memory, say); otherwise
   * undefined and the failure is reported as an error.
   */
  readonly explainLost?: (startedAt: number) => Promise<SandboxExecResult | undefined>
  /**
   * Whether the host itself is ending the sandbox (`destroy()`, the
   * provider's `close()`, its lifetime), not it ending underneath. A command
   * whose connection that cuts is not explained (`explainLost`): its end is
   * the host's doing, and it fails with `SandboxDestroyedError`.
   */
  readonly endedByHost?: () => boolean
}

/**
 * A command running in a sandbox, through its agent. Its output is collected
 * (UTF-8 safe, capped) as it streams in; `signal` aborting kills the
 * command's whole process tree and marks the result `aborted`.
 */
export class AgentProcess implements SandboxProcess {
  private readonly settled: Promise<SandboxExecResult>
  private readonly startedAt = Date.now()
  private removeAbortListener = (): void => {}
  private finished = false
  private detached = false
  readonly pid: number

  constructor(
    private readonly session: AgentExecSession,
    private readonly collector: ExecOutputCollector,
    private readonly hooks: AgentProcessHooks,
    signal: AbortSignal | undefined,
    /** Output dropped while nobody was attached, for a handle from `attachProcess`. */
    readonly droppedOutputBytes = 0,
  ) {
    this.pid = session.pid
    if (signal) {
      const onAbort = (): void => {
        void this.session.cancel('SIGKILL', 'abort').catch(() => {})
      }
      if (signal.aborted) onAbort()
      else {
        signal.addEventListener('abort', onAbort, { once: true })
        this.removeAbortListener = () => signal.removeEventListener('abort', onAbort)
      }
    }
    this.settled = this.collect()
    this.settled.catch(() => {})
  }

  /** The agent's id of the process (absent only on an agent too old to keep processes). */
  get id(): string | undefined {
    return this.session.id
  }

  /**
   * Stops following the process; it runs on, its output kept for the next
   * `attachProcess`. On an agent too old to keep processes the connection
   * is its life, so this refuses instead of killing it.
   */
  async detach(): Promise<void> {
    if (this.finished || this.detached) return
    if (this.session.id === undefined)
      throw new SandboxOperationError(
        'detach',
        "the sandbox's agent is too old to keep a process without a connection; it was not detached",
      )
    this.detached = true
    this.session.detach()
    await this.settled.catch(() => {})
  }

  async write(data: string | Uint8Array): Promise<void> {
    this.assertLive()
    try {
      await this.session.writeStdin(typeof data === 'string' ? textEncoder.encode(data) : data)
    } catch (error) {
      if (error instanceof AgentStdinClosedError)
        throw new SandboxOperationError('write', "the command's stdin is closed", { cause: error })
      throw this.hooks.client.translate(error, 'write')
    }
  }

  async closeStdin(): Promise<void> {
    this.assertLive()
    try {
      await this.session.endStdin()
    } catch (error) {
      throw this.hooks.client.translate(error, 'closeStdin')
    }
  }

  async kill(signal: 'SIGTERM' | 'SIGKILL' = 'SIGKILL'): Promise<void> {
    this.assertLive()
    try {
      await this.session.cancel(signal, 'kill')
    } catch (error) {
      throw this.hooks.client.translate(error, 'kill')
    }
  }

  wait(): Promise<SandboxExecResult> {
    return this.settled
  }

  /** Kills the command if it is still running (for `await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.finished || this.detached || this.hooks.isDestroyed()) return
    await this.kill('SIGKILL').catch(() => {})
    await this.settled.catch(() => {})
  }

  /** Drops the connection (the agent then kills the command). */
  abandon(): void {
    this.session.abandon()
  }

  private async collect(): Promise<SandboxExecResult> {
    try {
      const exit = await this.session.result
      const output = this.collector.finish()
      const result: SandboxExecResult = {
        exitCode: exit.exitCode,
        stdout: output.stdout,
        stderr: output.stderr,
        ...(exit.signal === null ? {} : { signal: exit.signal }),
        timedOut: exit.timedOut,
        aborted: exit.aborted,
        oomKilled: exit.oomKilled,
        durationMs: exit.durationMs,
        stdoutTruncated: output.stdoutTruncated,
        stderrTruncated: output.stderrTruncated,
      }
      this.hooks.onSettled({ result })
      return result
    } catch (error) {
      if (this.detached) {
        this.hooks.onSettled({ detached: true })
        throw new SandboxOperationError(
          'wait',
          `detached from process ${this.session.id}; attachProcess('${this.session.id}') follows it again`,
          { cause: error },
        )
      }
      // Asked as the connection fails: a destroy marks the sandbox before it
      // cuts its commands' connections, so a command cut by one is never
      // taken for one killed for memory (a destroy's SIGKILL looks like one).
      const explained =
        this.hooks.endedByHost?.() === true
          ? undefined
          : await this.hooks.explainLost?.(this.startedAt).catch(() => undefined)
      if (explained) {
        // What the command wrote before it died was streamed already; the result keeps it.
        const output = this.collector.finish()
        const result: SandboxExecResult = {
          ...explained,
          stdout: output.stdout,
          stderr: output.stderr,
          stdoutTruncated: output.stdoutTruncated,
          stderrTruncated: output.stderrTruncated,
        }
        this.hooks.onSettled({ result })
        return result
      }
      const failure = this.hooks.isDestroyed()
        ? new SandboxDestroyedError(this.hooks.sandboxId, { cause: error })
        : this.hooks.client.translate(error, 'exec')
      this.hooks.onSettled({ error: failure })
      throw failure
    } finally {
      this.finished = true
      this.removeAbortListener()
    }
  }

  private assertLive(): void {
    if (this.hooks.isDestroyed()) throw new SandboxDestroyedError(this.hooks.sandboxId)
    if (this.detached)
      throw new SandboxOperationError(
        'process',
        `this handle is detached from process ${this.session.id}; attachProcess('${this.session.id}') follows it again`,
      )
  }
}
