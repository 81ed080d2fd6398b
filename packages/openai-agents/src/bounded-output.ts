import { SANDBOX_MAX_OUTPUT_BYTES } from '@cordon/core'

/**
 * The SDK's `truncateOutput` counts a token as four bytes; the constant is
 * not exported, so the reported token count uses the same value.
 */
const BYTES_PER_TOKEN = 4

/**
 * A command's interleaved output, kept whole up to cordon's output cap and
 * beyond it only as its first and last halves, what lies between counted
 * and dropped as it arrives. Kept whole, the SDK's `truncateOutput` sees
 * exactly what was printed, so the model reads it as the SDK's own clients
 * show it (its line count and its head and tail of the token budget); a
 * command that prints gigabytes still costs the host a bounded amount of
 * memory (about the cap, as the exec result's own streams do).
 */
export class BoundedOutput {
  readonly #keep: number
  #head = ''
  #tail: string[] = []
  #tailLength = 0
  #droppedCharacters = 0
  #totalBytes = 0

  /**
   * `keep` characters of head and of tail (one UTF-16 unit is at least one
   * UTF-8 byte, so `keep` characters hold `keep` bytes): half cordon's
   * output cap each unless a test names a smaller bound.
   */
  constructor(keep = Math.floor(SANDBOX_MAX_OUTPUT_BYTES / 2)) {
    this.#keep = Math.max(0, Math.floor(keep))
  }

  push(data: string): void {
    this.#totalBytes += Buffer.byteLength(data)
    let rest = data
    if (this.#head.length < this.#keep) {
      const room = unitsBeforeSplit(rest, this.#keep - this.#head.length)
      this.#head += rest.slice(0, room)
      rest = rest.slice(room)
    }
    if (rest.length === 0) return
    this.#tail.push(rest)
    this.#tailLength += rest.length
    // Compacting at twice the bound keeps the work linear in the output.
    if (this.#tailLength > 2 * this.#keep) {
      const joined = this.#tail.join('')
      const cut = unitsBeforeSplit(joined, joined.length - this.#keep, true)
      this.#droppedCharacters += cut
      this.#tail = [joined.slice(cut)]
      this.#tailLength = joined.length - cut
    }
  }

  /** Whether some output was seen but not kept. */
  get truncated(): boolean {
    return this.#droppedCharacters > 0 || this.#tailLength > this.#keep
  }

  /** Characters held now; at most twice `keep` plus one chunk. */
  get retainedCharacters(): number {
    return this.#head.length + this.#tailLength
  }

  /**
   * The output as kept. When some was dropped it opens with the notice the
   * SDK's `truncateOutput` recognises and keeps in front of its own marker,
   * so the model reads that output was cut and by how much.
   */
  text(): string {
    const joined = this.#tail.join('')
    const overflow = Math.max(0, joined.length - this.#keep)
    const cut = overflow === 0 ? 0 : unitsBeforeSplit(joined, overflow, true)
    const dropped = this.#droppedCharacters + cut
    const kept = `${this.#head}${joined.slice(cut)}`
    return dropped === 0
      ? kept
      : `[...${dropped} characters truncated from process output...]\n${kept}`
  }

  /** The SDK's token count for everything the command printed, kept or not. */
  get originalTokenCount(): number {
    return Math.ceil(this.#totalBytes / BYTES_PER_TOKEN)
  }
}

/**
 * `at`, moved so that the split does not fall inside a surrogate pair (which
 * would leave half a character to be encoded as U+FFFD): back for a head,
 * forward for a tail's cut.
 */
function unitsBeforeSplit(text: string, at: number, forward = false): number {
  if (at <= 0 || at >= text.length) return Math.max(0, Math.min(at, text.length))
  const before = text.charCodeAt(at - 1)
  const isHighSurrogate = before >= 0xd800 && before <= 0xdbff
  if (!isHighSurrogate) return at
  return forward ? at + 1 : at - 1
}
