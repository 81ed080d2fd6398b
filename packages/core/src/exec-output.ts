import { SANDBOX_MAX_OUTPUT_BYTES } from './constants.js'
import type { SandboxOutputBytes, SandboxOutputChunk } from './sandbox.js'

interface StreamState {
  readonly decoder: InstanceType<typeof TextDecoder>
  readonly kept: Uint8Array[]
  keptBytes: number
  truncated: boolean
}

/**
 * Collects a command's stdout and stderr as they arrive. Each stream is decoded
 * incrementally, so a multi-byte character split across chunks is delivered
 * whole; the bytes themselves go to `onOutputBytes` as they came; the bytes
 * kept for the result are capped per stream, cut at a character boundary,
 * and the truncation is recorded.
 */
export class ExecOutputCollector {
  private readonly limit: number
  private readonly onOutput: ((chunk: SandboxOutputChunk) => void) | undefined
  private readonly onOutputBytes: ((chunk: SandboxOutputBytes) => unknown) | undefined
  private readonly streams = {
    stdout: newState(),
    stderr: newState(),
  }

  constructor(options: {
    maxOutputBytes?: number
    onOutput?: (chunk: SandboxOutputChunk) => void
    onOutputBytes?: (chunk: SandboxOutputBytes) => unknown
  }) {
    this.limit = options.maxOutputBytes ?? SANDBOX_MAX_OUTPUT_BYTES
    this.onOutput = options.onOutput
    this.onOutputBytes = options.onOutputBytes
  }

  /**
   * Takes the next piece of one stream. `bytes` goes to `onOutputBytes` as
   * it is, so a backend passes bytes it does not reuse. Returns a promise
   * when `onOutputBytes` asked to hold further output: the backend reads
   * no more of the command's output until it settles (it never rejects).
   */
  push(stream: 'stdout' | 'stderr', bytes: Uint8Array): Promise<void> | undefined {
    if (bytes.byteLength === 0) return undefined
    const state = this.streams[stream]
    if (this.onOutput) {
      const data = state.decoder.decode(bytes, { stream: true })
      if (data) this.deliver({ stream, data })
    }
    this.keep(state, bytes)
    return this.onOutputBytes ? this.deliverBytes({ stream, bytes }) : undefined
  }

  /** Flushes decoders and returns what was kept. */
  finish(): { stdout: string; stderr: string; stdoutTruncated: boolean; stderrTruncated: boolean } {
    for (const stream of ['stdout', 'stderr'] as const) {
      if (!this.onOutput) continue
      const tail = this.streams[stream].decoder.decode()
      if (tail) this.deliver({ stream, data: tail })
    }
    return {
      stdout: decodeKept(this.streams.stdout),
      stderr: decodeKept(this.streams.stderr),
      stdoutTruncated: this.streams.stdout.truncated,
      stderrTruncated: this.streams.stderr.truncated,
    }
  }

  private keep(state: StreamState, bytes: Uint8Array): void {
    if (state.truncated) return
    const room = this.limit - state.keptBytes
    if (bytes.byteLength <= room) {
      state.kept.push(bytes.slice())
      state.keptBytes += bytes.byteLength
      return
    }
    state.truncated = true
    if (room > 0) {
      const head = bytes.subarray(0, room)
      state.kept.push(head.slice())
      state.keptBytes += room
    }
  }

  private deliver(chunk: SandboxOutputChunk): void {
    try {
      this.onOutput?.(chunk)
    } catch {
      // A throwing listener must not break the command's bookkeeping.
    }
  }

  private deliverBytes(chunk: SandboxOutputBytes): Promise<void> | undefined {
    let held: unknown
    try {
      held = this.onOutputBytes?.(chunk)
    } catch {
      return undefined
    }
    if (!isThenable(held)) return undefined
    // Settled either way: a listener's failure must not end the command's output.
    return new Promise<void>((resolve) => {
      try {
        held.then(
          () => resolve(),
          () => resolve(),
        )
      } catch {
        resolve()
      }
    })
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  )
}

function newState(): StreamState {
  return { decoder: new TextDecoder('utf-8'), kept: [], keptBytes: 0, truncated: false }
}

function decodeKept(state: StreamState): string {
  const all = concatBytes(state.kept, state.keptBytes)
  const end = state.truncated ? utf8BoundaryAtOrBefore(all, all.byteLength) : all.byteLength
  return new TextDecoder('utf-8').decode(all.subarray(0, end))
}

export function concatBytes(chunks: readonly Uint8Array[], total?: number): Uint8Array {
  const size = total ?? chunks.reduce((sum, chunk) => sum + chunk.byteLength, 0)
  const out = new Uint8Array(size)
  let offset = 0
  for (const chunk of chunks) {
    out.set(chunk, offset)
    offset += chunk.byteLength
  }
  return out
}

/** Largest index <= `end` that does not fall inside a UTF-8 multi-byte sequence. */
export function utf8BoundaryAtOrBefore(bytes: Uint8Array, end: number): number {
  let index = end
  // Step back over continuation bytes (10xxxxxx), at most three.
  let back = 0
  while (index > 0 && back < 3 && (bytes[index - 1]! & 0xc0) === 0x80) {
    index--
    back++
  }
  if (index === 0) return end
  const lead = bytes[index - 1]!
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1
  return need > 1 && need > back + 1 ? index - 1 : end
}
