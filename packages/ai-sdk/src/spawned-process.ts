import type { Sandbox, SandboxExecResult, SandboxOutputBytes } from '@cordon/core'
import type { SandboxProcessHandle } from './harness-types.js'

export interface SpawnRequest {
  readonly command: string
  readonly cwd: string | undefined
  readonly env: Record<string, string> | undefined
  readonly abortSignal: AbortSignal | undefined
}

/**
 * The harness's `spawn` over cordon: `sh -c command` started in the
 * background (`Sandbox.start`, no default timeout, stdin closed), its output
 * streamed as it is produced: the byte streams carry the bytes the command
 * wrote, unchanged (`onOutputBytes`), binary output included. On a backend without
 * `start`, the command runs through `exec` and so under the exec timeout.
 *
 * `wait()` rejects with the abort reason when `abortSignal` ended the
 * process, as the harness's contract says; `kill()` is idempotent.
 */
export async function spawnProcess(
  sandbox: Sandbox,
  request: SpawnRequest,
): Promise<SandboxProcessHandle> {
  request.abortSignal?.throwIfAborted()
  const stdout = controlledStream()
  const stderr = controlledStream()
  // Enqueueing never waits for a reader, so nothing is returned to hold the
  // command: a reader that never reads one stream (say stderr) must not stall
  // the command (the stream buffers what it has not read). cordon hands over
  // bytes it does not reuse, so they are enqueued as they came.
  const onOutputBytes = (chunk: SandboxOutputBytes): void => {
    ;(chunk.stream === 'stdout' ? stdout : stderr).push(chunk.bytes)
  }
  const killer = new AbortController()
  const signal = request.abortSignal
    ? AbortSignal.any([request.abortSignal, killer.signal])
    : killer.signal
  const options = {
    ...(request.cwd ? { cwd: request.cwd } : {}),
    ...(request.env ? { env: request.env } : {}),
    signal,
    onOutputBytes,
  }
  const result: Promise<SandboxExecResult> = sandbox.start
    ? (await sandbox.start('sh', ['-c', request.command], { ...options, openStdin: false })).wait()
    : sandbox.exec('sh', ['-c', request.command], options)
  const ended = result.finally(() => {
    stdout.end()
    stderr.end()
  })
  // Settled either way before anyone waits, so an unobserved rejection is never reported.
  ended.catch(() => {})
  return {
    stdout: stdout.readable,
    stderr: stderr.readable,
    async wait() {
      const outcome = await ended
      if (outcome.aborted && request.abortSignal?.aborted) throw request.abortSignal.reason
      return { exitCode: outcome.exitCode }
    },
    async kill() {
      killer.abort()
      await ended.catch(() => {})
    },
  }
}

/** A byte stream fed from outside; pushes after a cancel are dropped. */
function controlledStream(): {
  readable: ReadableStream<Uint8Array>
  push(bytes: Uint8Array): void
  end(): void
} {
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined
  let open = true
  const readable = new ReadableStream<Uint8Array>({
    start(given) {
      controller = given
    },
    cancel() {
      open = false
    },
  })
  return {
    readable,
    push(bytes) {
      if (open) controller?.enqueue(bytes)
    },
    end() {
      if (open) controller?.close()
      open = false
    },
  }
}
