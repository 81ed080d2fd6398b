import { hrtime } from 'node:process'
import { childProcess } from './child-process-module.js'
import { sha256 } from './protocol/sha256.js'
import { randomBytes } from './random-bytes.js'

/**
 * Where the agent's challenge nonces come from.
 *
 * A guest resumed from a snapshot starts with the random state the snapshot
 * captured, so two guests resumed from one snapshot would hand out the same
 * "random" bytes until something new is mixed in. Every nonce therefore hashes
 * the platform's random bytes together with a pool that each resume re-seeds
 * (from the configured hook's output), a counter and the high-resolution
 * clock: if any one of them differs between two clones, so do their nonces.
 */
export class NonceSource {
  private pool: Buffer = randomBytes(32)
  private counter = 0n

  /** 32 fresh bytes as lowercase hex. */
  next(): string {
    this.counter++
    return sha256(
      this.pool,
      randomBytes(32),
      Buffer.from(String(this.counter)),
      Buffer.from(String(hrtime.bigint())),
    ).toString('hex')
  }

  /** Mixes new entropy into the pool. */
  reseed(extra: Uint8Array): void {
    this.pool = sha256(this.pool, extra, randomBytes(32), Buffer.from(String(hrtime.bigint())))
  }
}

/** Most bytes of hook output mixed in; more is ignored. */
const HOOK_OUTPUT_LIMIT = 64 * 1024
const HOOK_TIMEOUT_MS = 10_000

/**
 * Runs the resume hook (an executable with no arguments and an empty
 * environment but PATH) and returns what it printed. A hook is how a guest
 * image re-seeds the kernel's generator after a resume, e.g. by writing bytes
 * the host provided to /dev/urandom; its output also re-seeds the agent.
 */
export function runReseedHook(path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    childProcess().execFile(
      path,
      [],
      {
        env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' },
        encoding: 'buffer',
        maxBuffer: HOOK_OUTPUT_LIMIT,
        timeout: HOOK_TIMEOUT_MS,
      },
      (error, stdout) => {
        if (error) reject(error)
        else resolve(stdout)
      },
    )
  })
}
