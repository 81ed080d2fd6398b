import { randomBytes } from 'node:crypto'

/** A new secret suitable for one sandbox: 32 random bytes, base64url (made by the host). */
export function newAgentSecret(): string {
  return randomBytes(32).toString('base64url')
}
