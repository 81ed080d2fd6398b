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

export interface AgentProcessHooks {
  readonly sandboxId: string
  readonly client: AgentClient
  readonly isDestroyed: () => boolean
  readonly onSettled: (result: SandboxExecResult | undefined) => void
  /**
   * When the command's connection fails: how the command ended, if the
   * backend knows (the whole sandbox was killed for memory, say); otherwise
   * undefined and the failure is reported as an error.
   */
  readonly explainLost?: (startedAt: number) => Promise<SandboxExecResult | undefined>
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

  constructor(
    private readonly session: AgentExecSession,
    private readonly collector: ExecOutputCollector,
    private readonly hooks: AgentProcessHooks,
    signal: AbortSignal | undefined,
  ) {
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
    if (this.finished || this.hooks.isDestroyed()) return
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
      this.hooks.onSettled(result)
      return result
    } catch (error) {
      const explained = await this.hooks.explainLost?.(this.startedAt).catch(() => undefined)
      if (explained) {
        this.hooks.onSettled(explained)
        return explained
      }
      this.hooks.onSettled(undefined)
      if (this.hooks.isDestroyed())
        throw new SandboxDestroyedError(this.hooks.sandboxId, { cause: error })
      throw this.hooks.client.translate(error, 'exec')
    } finally {
      this.finished = true
      this.removeAbortListener()
    }
  }

  private assertLive(): void {
    if (this.hooks.isDestroyed()) throw new SandboxDestroyedError(this.hooks.sandboxId)
  }
}
