import { constantTimeEqual, hmacSha256 } from './sha256.js'

/**
 * Challenge-response proof that a client holds the per-sandbox secret. The
 * agent sends a fresh random nonce on every connection; the client answers
 * HMAC-SHA256(secret, nonce). The secret itself never crosses the wire, and a
 * recorded answer is useless against the next nonce. Both halves use
 * sha256.ts (not `node:crypto`, which the agent does not load at start).
 */

/** Shortest secret the agent accepts: anything shorter is guessable. */
export const MIN_SECRET_LENGTH = 16

/** The client's answer to a nonce: lowercase hex HMAC-SHA256 keyed with the secret's UTF-8 bytes. */
export function computeAuthProof(secret: string, nonceHex: string): string {
  return hmacSha256(Buffer.from(secret, 'utf8'), Buffer.from(nonceHex, 'hex')).toString('hex')
}

/** Checks a client's answer in constant time. */
export function verifyAuthProof(secret: string, nonceHex: string, proof: string): boolean {
  const expected = hmacSha256(Buffer.from(secret, 'utf8'), Buffer.from(nonceHex, 'hex'))
  // 32 bytes when the proof is well-formed; any other length is refused outright.
  return constantTimeEqual(Buffer.from(proof, 'hex'), expected)
}
