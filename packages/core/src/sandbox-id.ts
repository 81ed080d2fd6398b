/** A sandbox id: `sbx_` followed by 26 lowercase base-32 characters (128 random bits). */
export type SandboxId = `sbx_${string}`

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567'
export const SANDBOX_ID_PATTERN = /^sbx_[a-z2-7]{26}$/

/** Mints a new id from the platform's cryptographic random source. */
export function newSandboxId(): SandboxId {
  const bytes = new Uint8Array(17)
  globalThis.crypto.getRandomValues(bytes)
  let bits = 0
  let value = 0
  let out = ''
  for (const byte of bytes) {
    value = (value << 8) | byte
    bits += 8
    while (bits >= 5 && out.length < 26) {
      out += ALPHABET[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
    value &= (1 << bits) - 1
  }
  return `sbx_${out}`
}

export function isSandboxId(value: unknown): value is SandboxId {
  return typeof value === 'string' && SANDBOX_ID_PATTERN.test(value)
}

/** A snapshot id: `snp_` followed by 26 lowercase base-32 characters (128 random bits). */
export const SNAPSHOT_ID_PATTERN = /^snp_[a-z2-7]{26}$/

/** Mints a new snapshot id, as random as a sandbox id. */
export function newSnapshotId(): string {
  return `snp_${newSandboxId().slice(4)}`
}

export function isSnapshotId(value: unknown): value is string {
  return typeof value === 'string' && SNAPSHOT_ID_PATTERN.test(value)
}
