import { createInterface } from 'node:readline'
import type { Readable } from 'node:stream'

/** One message of a streamed engine operation (image pull, push, build). */
export interface EngineProgressMessage {
  /** A layer's id in a pull or push; the tag in a pull's first message. */
  readonly id?: string
  readonly status?: string
  readonly progressDetail?: { readonly current?: number; readonly total?: number }
  /** A build's output. */
  readonly stream?: string
  /** A build's result: the image id. */
  readonly aux?: { readonly ID?: string }
  readonly error?: string
  readonly errorDetail?: { readonly message?: string }
}

/**
 * The engine reported a failure inside a streamed operation: it had already
 * answered 200, so the failure is a message in the stream, not a status.
 */
export class EngineStreamError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'EngineStreamError'
  }
}

/**
 * Reads a streamed operation's JSON lines, handing each message to
 * `onMessage`. Resolves when the engine ends the stream; rejects with
 * {@link EngineStreamError} at the first error message (and closes the
 * stream, which ends the operation on the engine), or with the stream's own
 * error (an abort, the engine going away).
 */
export function followEngineProgress(
  stream: NodeJS.ReadableStream,
  onMessage: (message: EngineProgressMessage) => void,
): Promise<void> {
  const readable = stream as Readable
  return new Promise((resolve, reject) => {
    // readline decodes across chunk boundaries, so a character split between two reads arrives whole.
    const lines = createInterface({ input: readable, crlfDelay: Number.POSITIVE_INFINITY })
    let failed = false
    const fail = (error: unknown): void => {
      if (failed) return
      failed = true
      lines.close()
      readable.destroy()
      reject(error)
    }
    lines.on('line', (line) => {
      if (failed || line.trim() === '') return
      let message: EngineProgressMessage
      try {
        message = JSON.parse(line) as EngineProgressMessage
      } catch {
        fail(
          new EngineStreamError(`the engine sent a line that is not JSON: ${line.slice(0, 200)}`),
        )
        return
      }
      if (message.error !== undefined || message.errorDetail !== undefined) {
        fail(
          new EngineStreamError(message.errorDetail?.message ?? message.error ?? 'unknown error'),
        )
        return
      }
      onMessage(message)
    })
    // readline re-emits the stream's errors.
    lines.on('error', fail)
    readable.on('error', fail)
    lines.on('close', () => {
      if (failed) return
      if (readable.errored) fail(readable.errored)
      else resolve()
    })
  })
}
