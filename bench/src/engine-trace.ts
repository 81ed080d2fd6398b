/**
 * A profile of engine round trips: wraps docker-modem's `dial` (shared by the
 * bench's dockerode and cordon's, which resolve to the same package) and
 * records every Engine API call with its start, the time its answer (or, for
 * a stream, its headers) arrived, and when a returned stream ended. This is
 * what explains where a create or exec spends its time.
 */
import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'

export interface EngineCall {
  readonly method: string
  readonly path: string
  readonly startMs: number
  answeredMs: number
  streamEndMs: number | undefined
}

interface ModemPrototype {
  dial(
    options: { method: string; path: string },
    callback: (error: unknown, data: unknown) => void,
  ): void
}

const require = createRequire(import.meta.url)
const dockerodeEntry = require.resolve('dockerode')
const modemModule = createRequire(dockerodeEntry)('docker-modem') as { prototype: ModemPrototype }
const originalDial = modemModule.prototype.dial

let recording: EngineCall[] | undefined
let origin = 0

modemModule.prototype.dial = function dial(this: ModemPrototype, options, callback) {
  const calls = recording
  if (!calls) return originalDial.call(this, options, callback)
  const call: EngineCall = {
    method: options.method,
    path: options.path.replace(/\?.*$/, '').replace(/[0-9a-f]{64}/g, '<id>'),
    startMs: performance.now() - origin,
    answeredMs: Number.NaN,
    streamEndMs: undefined,
  }
  calls.push(call)
  originalDial.call(this, options, (error, data) => {
    call.answeredMs = performance.now() - origin
    const stream = data as { once?: (event: string, listener: () => void) => void } | null
    if (!error && stream && typeof stream.once === 'function') {
      const ended = () => {
        call.streamEndMs ??= performance.now() - origin
      }
      stream.once('end', ended)
      stream.once('close', ended)
    }
    callback(error, data)
  })
}

/** Runs `operation` and returns the engine calls it made, times relative to its start. */
export async function traceEngineCalls(
  operation: () => Promise<void>,
): Promise<{ totalMs: number; calls: EngineCall[] }> {
  const calls: EngineCall[] = []
  recording = calls
  origin = performance.now()
  try {
    await operation()
  } finally {
    recording = undefined
  }
  return { totalMs: performance.now() - origin, calls }
}
