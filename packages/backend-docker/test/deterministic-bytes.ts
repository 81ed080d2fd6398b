import { createHash } from 'node:crypto'

/**
 * `total` deterministic bytes for `seed`, in pieces of `pieceBytes`,
 * produced piece by piece and never all at once: a large upload's source
 * whose digest a test can compute again instead of holding it.
 */
export async function* deterministicBytes(
  total: number,
  seed: number,
  pieceBytes = 1024 * 1024,
): AsyncGenerator<Uint8Array> {
  let state = seed
  for (let sent = 0; sent < total; sent += pieceBytes) {
    const chunk = new Uint8Array(Math.min(pieceBytes, total - sent))
    for (let i = 0; i < chunk.length; i += 4) {
      state = (state * 1664525 + 1013904223) >>> 0
      chunk[i] = state & 0xff
      chunk[i + 1] = (state >>> 8) & 0xff
      chunk[i + 2] = (state >>> 16) & 0xff
      chunk[i + 3] = state >>> 24
    }
    yield chunk
  }
}

/** The SHA-256 (hex) of a stream of pieces, and how many bytes it had. */
export async function digestOf(
  chunks: AsyncIterable<Uint8Array>,
): Promise<{ hash: string; bytes: number }> {
  const hash = createHash('sha256')
  let bytes = 0
  for await (const chunk of chunks) {
    hash.update(chunk)
    bytes += chunk.byteLength
  }
  return { hash: hash.digest('hex'), bytes }
}
