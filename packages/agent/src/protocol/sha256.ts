/**
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written out here instead
 * of taken from `node:crypto`, on purpose: loading `node:crypto` costs the
 * agent about 6 ms of every sandbox's start (measured inside a container on
 * the runtime volume's Node; a third of the agent's own start-up, bench
 * scenario 1), and these two functions over a few dozen bytes are all the
 * agent's start-up path needs of it. Checked against the standards' test
 * vectors and against `node:crypto` on random inputs
 * (test/sha256.test.ts). Nothing here depends on a secret for its timing:
 * the rounds are fixed 32-bit arithmetic with no table lookups indexed by
 * data.
 */

const ROUND_CONSTANTS = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
])

const INITIAL_STATE = [
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]

const BLOCK_BYTES = 64

/** The SHA-256 digest of the concatenated parts (32 bytes). */
export function sha256(...parts: readonly Uint8Array[]): Buffer {
  let length = 0
  for (const part of parts) length += part.byteLength
  // The message, a 0x80 byte, zeros, and the bit length in the last 8 bytes of the last block.
  const padded = Buffer.alloc(Math.ceil((length + 9) / BLOCK_BYTES) * BLOCK_BYTES)
  let offset = 0
  for (const part of parts) {
    padded.set(part, offset)
    offset += part.byteLength
  }
  padded[length] = 0x80
  const bits = length * 8
  padded.writeUInt32BE(Math.floor(bits / 0x1_0000_0000), padded.byteLength - 8)
  padded.writeUInt32BE(bits >>> 0, padded.byteLength - 4)

  const state = Int32Array.from(INITIAL_STATE)
  const schedule = new Int32Array(64)
  for (let block = 0; block < padded.byteLength; block += BLOCK_BYTES) {
    for (let t = 0; t < 16; t++) schedule[t] = padded.readInt32BE(block + t * 4)
    for (let t = 16; t < 64; t++) {
      const w15 = schedule[t - 15]!
      const w2 = schedule[t - 2]!
      const s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >>> 3)
      const s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >>> 10)
      schedule[t] = (schedule[t - 16]! + s0 + schedule[t - 7]! + s1) | 0
    }
    let a = state[0]!
    let b = state[1]!
    let c = state[2]!
    let d = state[3]!
    let e = state[4]!
    let f = state[5]!
    let g = state[6]!
    let h = state[7]!
    for (let t = 0; t < 64; t++) {
      const sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
      const choice = (e & f) ^ (~e & g)
      const temp1 = (h + sum1 + choice + ROUND_CONSTANTS[t]! + schedule[t]!) | 0
      const sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
      const majority = (a & b) ^ (a & c) ^ (b & c)
      const temp2 = (sum0 + majority) | 0
      h = g
      g = f
      f = e
      e = (d + temp1) | 0
      d = c
      c = b
      b = a
      a = (temp1 + temp2) | 0
    }
    state[0] = (state[0]! + a) | 0
    state[1] = (state[1]! + b) | 0
    state[2] = (state[2]! + c) | 0
    state[3] = (state[3]! + d) | 0
    state[4] = (state[4]! + e) | 0
    state[5] = (state[5]! + f) | 0
    state[6] = (state[6]! + g) | 0
    state[7] = (state[7]! + h) | 0
  }
  const digest = Buffer.allocUnsafe(32)
  for (let i = 0; i < 8; i++) digest.writeInt32BE(state[i]!, i * 4)
  return digest
}

/** HMAC-SHA256 of the message under the key (32 bytes). */
export function hmacSha256(key: Uint8Array, message: Uint8Array): Buffer {
  const block = Buffer.alloc(BLOCK_BYTES)
  block.set(key.byteLength > BLOCK_BYTES ? sha256(key) : key)
  const inner = Buffer.allocUnsafe(BLOCK_BYTES)
  const outer = Buffer.allocUnsafe(BLOCK_BYTES)
  for (let i = 0; i < BLOCK_BYTES; i++) {
    inner[i] = block[i]! ^ 0x36
    outer[i] = block[i]! ^ 0x5c
  }
  return sha256(outer, sha256(inner, message))
}

/** Whether two byte strings are equal, in time that depends only on their length. */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  let difference = 0
  for (let i = 0; i < a.byteLength; i++) difference |= a[i]! ^ b[i]!
  return difference === 0
}

function rotr(value: number, bits: number): number {
  return (value >>> bits) | (value << (32 - bits))
}
