import { constantTimeEqual, hmacSha256 } from './sha256.js'

/**
 * Challenge-response proofs, both ways, that each end of a connection holds
 * the per-sandbox secret. The agent sends a fresh random nonce on every
 * connection; the client answers HMAC-SHA256(secret, nonce) with a fresh
 * nonce of its own; the agent answers that with HMAC-SHA256(secret,
 * AGENT_PROOF_LABEL || client nonce || agent nonce). So whatever answers on
 * a channel (a wrong container after a race, an impostor on a network path)
 * is trusted only if it holds the secret, not only the agent's peer.
 *
 * The label keeps the two kinds of proof apart: a client only ever computes
 * the HMAC of a bare 32-byte nonce, so an impostor cannot have a client
 * compute the agent's proof for it by sending the client's own nonce back as
 * its challenge on another connection (a reflection). The secret itself never
 * crosses the wire, and a recorded answer is useless against the next nonce.
 * Both halves use sha256.ts (not `node:crypto`, which the agent does not load
 * at start).
 */

/** The client's answer to a nonce: lowercase hex HMAC-SHA256 keyed with the secret's UTF-8 bytes. */
export function computeAuthProof(secret: string, nonceHex: string): string {
  return hmacSha256(Buffer.from(secret, 'utf8'), Buffer.from(nonceHex, 'hex')).toString('hex')
}

const AGENT_PROOF_LABEL = Buffer.from('cordon agent proof\0', 'utf8')

/** The agent's answer to the client's nonce, bound to the agent's own nonce of the same connection. */
export function computeAgentProof(
  secret: string,
  clientNonceHex: string,
  agentNonceHex: string,
): string {
  return hmacSha256(
    Buffer.from(secret, 'utf8'),
    Buffer.concat([
      AGENT_PROOF_LABEL,
      Buffer.from(clientNonceHex, 'hex'),
      Buffer.from(agentNonceHex, 'hex'),
    ]),
  ).toString('hex')
}

/** Checks the agent's answer in constant time. */
export function verifyAgentProof(
  secret: string,
  clientNonceHex: string,
  agentNonceHex: string,
  proof: string,
): boolean {
  const expected = Buffer.from(computeAgentProof(secret, clientNonceHex, agentNonceHex), 'hex')
  return constantTimeEqual(Buffer.from(proof, 'hex'), expected)
}

/** Checks a client's answer in constant time. */
export function verifyAuthProof(secret: string, nonceHex: string, proof: string): boolean {
  const expected = hmacSha256(Buffer.from(secret, 'utf8'), Buffer.from(nonceHex, 'hex'))
  // 32 bytes when the proof is well-formed; any other length is refused outright.
  return constantTimeEqual(Buffer.from(proof, 'hex'), expected)
}
