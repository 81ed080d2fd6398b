import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'

/**
 * Challenge-response proof that a client holds the per-sandbox secret. The
 * agent sends a fresh random nonce on every connection; the client answers
 * HMAC-SHA256(secret, nonce). The secret itself never crosses the wire, and a
 * recorded answer is useless against the next nonce.
 */

/** Shortest secret the agent accepts: anything shorter is guessable. */
export const MIN_SECRET_LENGTH = 16

/** A new secret suitable for one sandbox: 32 random bytes, base64url. */
export function newAgentSecret(): string {
  return randomBytes(32).toString('base64url')
}

/** The client's answer to a nonce: lowercase hex HMAC-SHA256 keyed with the secret's UTF-8 bytes. */
export function computeAuthProof(secret: string, nonceHex: string): string {
  return createHmac('sha256', secret).update(Buffer.from(nonceHex, 'hex')).digest('hex')
}

/** Checks a client's answer in constant time. */
export function verifyAuthProof(secret: string, nonceHex: string, proof: string): boolean {
  const expected = Buffer.from(computeAuthProof(secret, nonceHex), 'hex')
  const given = Buffer.from(proof, 'hex')
  // Both are 32 bytes when the proof is well-formed; timingSafeEqual throws on a length mismatch.
  return given.byteLength === expected.byteLength && timingSafeEqual(given, expected)
}
