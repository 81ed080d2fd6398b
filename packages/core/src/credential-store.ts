import {
  chmodSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { SandboxConfigValidationError, SandboxCredentialRefusedError } from './errors.js'
import { type KeptCreateSettings, parseKeptCreateSettings } from './kept-create-settings.js'
import { isSandboxId, type SandboxId } from './sandbox-id.js'

/**
 * A detached sandbox's credential, and where a provider keeps it.
 *
 * The credential is what the creator held: the sandbox agent's secret (the
 * agent proves, on every connection, that a host holds it), with the
 * sandbox's id, backend and end time, so that a credential is refused for
 * another sandbox before anything is dialled, and the create's settings
 * (kept-create-settings.ts: its environment among them, which may hold
 * secrets), so that a host that connects forks it as the creator would.
 * It is kept only where the host says: in the host's own storage
 * (`sandbox.credential`), and in the provider's credential store, a
 * directory of the host's user. Never in a label, an environment variable
 * or anything else the engine shows.
 */

const PREFIX = 'cordon-credential-v1.'

interface CredentialFields {
  readonly sandboxId: SandboxId
  readonly backend: string
  readonly secret: string
  readonly endsAt: number
  /** Absent from a credential made before they were kept. */
  readonly settings?: KeptCreateSettings
}

export function encodeCredential(fields: CredentialFields): string {
  return PREFIX + Buffer.from(JSON.stringify(fields), 'utf8').toString('base64url')
}

/** The fields of `credential` for sandbox `sandboxId` of `backend`, or the typed refusal. */
export function decodeCredential(
  credential: string,
  sandboxId: SandboxId,
  backend: string,
): CredentialFields {
  let fields: Partial<CredentialFields> | undefined
  if (credential.startsWith(PREFIX)) {
    try {
      fields = JSON.parse(Buffer.from(credential.slice(PREFIX.length), 'base64url').toString())
    } catch {
      fields = undefined
    }
  }
  if (
    !fields ||
    typeof fields.secret !== 'string' ||
    typeof fields.sandboxId !== 'string' ||
    typeof fields.backend !== 'string' ||
    typeof fields.endsAt !== 'number' ||
    (fields.settings !== undefined && !parseKeptCreateSettings(fields.settings))
  )
    throw new SandboxCredentialRefusedError(
      sandboxId,
      'the credential is not one cordon made (sandbox.credential of a detached sandbox)',
    )
  if (fields.sandboxId !== sandboxId)
    throw new SandboxCredentialRefusedError(
      sandboxId,
      `the credential is sandbox ${fields.sandboxId}'s`,
    )
  if (fields.backend !== backend)
    throw new SandboxCredentialRefusedError(
      sandboxId,
      `the credential is for a sandbox of ${fields.backend}, and this provider's backend is ${backend}`,
    )
  return fields as CredentialFields
}

/** `$XDG_STATE_HOME/cordon/credentials`, else `~/.local/state/cordon/credentials`. */
export function defaultCredentialStore(): string {
  const state = process.env.XDG_STATE_HOME
  const base = state?.startsWith('/') ? state : join(homedir(), '.local', 'state')
  return join(base, 'cordon', 'credentials')
}

/** One stored credential, as its file holds it. */
export interface StoredCredential {
  readonly sandboxId: SandboxId
  readonly backend: string
  readonly endsAt: number
  readonly credential: string
}

/**
 * A directory of credentials, one file per detached sandbox (`<id>.json`,
 * mode 0600), in a directory of mode 0700. A directory that another user
 * owns, or that others may enter, is refused rather than used: a credential
 * there could be read by them.
 */
export class CredentialStore {
  constructor(readonly directory: string) {}

  /** Writes `credential` for its sandbox, atomically (a reader never sees half a file). */
  save(stored: StoredCredential): void {
    this.prepare()
    const path = this.pathOf(stored.sandboxId)
    const partial = `${path}.${process.pid}.partial`
    writeFileSync(partial, `${JSON.stringify(stored)}\n`, { mode: 0o600, flag: 'wx' })
    renameSync(partial, path)
  }

  /** The credential kept for `sandboxId`, or undefined. */
  load(sandboxId: SandboxId): StoredCredential | undefined {
    if (!isSandboxId(sandboxId)) return undefined
    try {
      const stored = JSON.parse(readFileSync(this.pathOf(sandboxId), 'utf8')) as StoredCredential
      return typeof stored.credential === 'string' ? stored : undefined
    } catch {
      return undefined
    }
  }

  remove(sandboxId: SandboxId): void {
    if (isSandboxId(sandboxId)) rmSync(this.pathOf(sandboxId), { force: true })
  }

  /**
   * Removes the credentials of sandboxes that have ended: past their end
   * time, or (with `isGone`) known to be gone. Returns their ids (with
   * `dryRun`, those it would remove).
   */
  prune(
    now: number,
    isGone: (sandboxId: SandboxId) => boolean = () => false,
    dryRun = false,
  ): SandboxId[] {
    let names: string[]
    try {
      names = readdirSync(this.directory)
    } catch {
      return []
    }
    const removed: SandboxId[] = []
    for (const name of names) {
      const id = name.replace(/\.json$/, '')
      if (!name.endsWith('.json') || !isSandboxId(id)) continue
      const stored = this.load(id)
      if (stored && stored.endsAt > now && !isGone(id)) continue
      if (!dryRun) this.remove(id)
      removed.push(id)
    }
    return removed
  }

  private pathOf(sandboxId: SandboxId): string {
    return join(this.directory, `${sandboxId}.json`)
  }

  private prepare(): void {
    mkdirSync(this.directory, { recursive: true, mode: 0o700 })
    const stats = lstatSync(this.directory)
    const uid = process.getuid?.()
    if (!stats.isDirectory() || (uid !== undefined && stats.uid !== uid))
      throw new SandboxConfigValidationError('provider config', [
        {
          path: 'credentialStore',
          message: `${this.directory} must be a directory of this user (uid ${uid})`,
        },
      ])
    if ((stats.mode & 0o077) !== 0) chmodSync(this.directory, 0o700)
  }
}
