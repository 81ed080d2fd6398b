import type { Writable } from 'node:stream'
import { escapeTerminalControls, type SandboxOutputBytes } from '@cordon/core'

/** A local stream a sandbox command's output goes to: process.stdout or stderr, or a test stream. */
export type OutputStream = Writable & { readonly isTTY?: boolean }

/** Why delivery stopped on its own: one of the local streams failed. */
export interface BrokenOutput {
  readonly stream: 'stdout' | 'stderr'
  readonly error: NodeJS.ErrnoException
}

/**
 * Delivers a sandbox command's stdout and stderr to cordon's own: the bytes
 * exactly as the command wrote them, except to a terminal, where the text is
 * shown with its control characters as escapes (unless `raw`) so that the
 * sandbox cannot drive the terminal.
 *
 * `onOutputBytes` holds the command's next piece of output until the local
 * stream has taken this one (Node's `write` returned false: wait for
 * `drain`), so a slow reader slows the command instead of filling memory.
 * A local stream that fails (its reader went away: EPIPE) ends delivery:
 * `broken` resolves with it, `signal` aborts (hand it to the command, so it
 * is stopped), and further output is dropped.
 */
export class CommandOutput {
  /** Resolves when a local stream failed; never rejects. */
  readonly broken: Promise<BrokenOutput>
  private readonly stopping = new AbortController()
  private failure: BrokenOutput | undefined
  private release: (() => void) | undefined
  private readonly decoders = {
    stdout: new TextDecoder('utf-8'),
    stderr: new TextDecoder('utf-8'),
  }
  private readonly detach: () => void

  constructor(
    private readonly streams: { readonly stdout: OutputStream; readonly stderr: OutputStream },
    private readonly options: { readonly raw: boolean },
  ) {
    let settle: (broken: BrokenOutput) => void = () => {}
    this.broken = new Promise((resolve) => {
      settle = resolve
    })
    const failed =
      (stream: 'stdout' | 'stderr') =>
      (error: NodeJS.ErrnoException): void => {
        if (this.failure) return
        this.failure = { stream, error }
        this.stop()
        settle(this.failure)
      }
    const onStdoutError = failed('stdout')
    const onStderrError = failed('stderr')
    streams.stdout.on('error', onStdoutError)
    streams.stderr.on('error', onStderrError)
    this.detach = () => {
      streams.stdout.off('error', onStdoutError)
      streams.stderr.off('error', onStderrError)
    }
  }

  /** Aborts when delivery has stopped (a local stream failed, or {@link stop}). */
  get signal(): AbortSignal {
    return this.stopping.signal
  }

  /** The local stream that failed, if one did. */
  get failed(): BrokenOutput | undefined {
    return this.failure
  }

  /** For `exec`/`start`'s `onOutputBytes`. */
  readonly onOutputBytes = (chunk: SandboxOutputBytes): Promise<void> | undefined => {
    if (this.stopping.signal.aborted) return undefined
    const stream = this.streams[chunk.stream]
    const shown = this.shown(chunk.stream, chunk.bytes)
    if (shown.length === 0) return undefined
    const taken = stream.write(shown)
    if (taken || this.stopping.signal.aborted) return undefined
    return new Promise<void>((resolve) => {
      const done = (): void => {
        stream.off('drain', done)
        stream.off('close', done)
        this.release = undefined
        resolve()
      }
      this.release = done
      stream.once('drain', done)
      // A stream that fails or closes never drains.
      stream.once('close', done)
    })
  }

  /**
   * Drops the rest of the command's output, and lets go of a piece that
   * waits for a stream to drain, so a command that is being killed can end
   * even when nobody reads cordon's output any more.
   */
  stop(): void {
    this.stopping.abort()
    this.release?.()
  }

  /** Shows what a terminal's decoder still holds (an incomplete character), once the command has ended. */
  finish(): void {
    for (const name of ['stdout', 'stderr'] as const) {
      if (!this.escapes(name) || this.stopping.signal.aborted) continue
      const tail = this.decoders[name].decode()
      if (tail) this.streams[name].write(escapeTerminalControls(tail))
    }
  }

  /** Stops listening for the streams' failures (a later one is main's to ignore). */
  [Symbol.dispose](): void {
    this.detach()
  }

  private escapes(name: 'stdout' | 'stderr'): boolean {
    return this.streams[name].isTTY === true && !this.options.raw
  }

  private shown(name: 'stdout' | 'stderr', bytes: Uint8Array): Uint8Array | string {
    if (!this.escapes(name)) return bytes
    return escapeTerminalControls(this.decoders[name].decode(bytes, { stream: true }))
  }
}
