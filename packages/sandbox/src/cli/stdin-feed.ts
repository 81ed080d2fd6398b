import type { Readable } from 'node:stream'
import type { SandboxProcess } from '@cordon/core'

/** cordon's own stdin: process.stdin, or a test stream. */
export type InputStream = Readable & { readonly isTTY?: boolean }

/**
 * Feeds `input` to a started program's stdin as it arrives (the next chunk
 * is read once the program was handed the last one, so a program that reads
 * slowly slows the reading) and closes the program's stdin at its end, so a
 * program that reads to the end of its input ends when `input` does. Once
 * the program no longer takes input (it closed its stdin or ended), reading
 * stops. Returns the function that stops feeding.
 */
export function feedStdin(program: SandboxProcess, input: InputStream): () => void {
  let stopped = false
  const stop = (): void => {
    if (stopped) return
    stopped = true
    input.off('data', forward)
    input.off('end', close)
    input.pause()
  }
  const forward = (chunk: Buffer): void => {
    input.pause()
    program.write(chunk).then(
      () => {
        if (!stopped) input.resume()
      },
      // The program closed its stdin or ended: what is left of the input is not its.
      () => stop(),
    )
  }
  const close = (): void => {
    if (stopped) return
    stop()
    void program.closeStdin().catch(() => {})
  }
  input.on('data', forward)
  input.once('end', close)
  // An input that fails to read ends the program's input there, as a closed
  // pipe would; the listener stays, so a failure after feeding stopped is no crash.
  input.on('error', close)
  input.resume()
  return stop
}
