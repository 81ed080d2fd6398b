import { SandboxConfigValidationError, SandboxControlRefusedError } from './errors.js'

/**
 * A volume's name: 1 to 64 letters, digits, `.`, `_` or `-`, starting with a
 * letter or digit, with no `..`. A backend keeps the name inside a namespace
 * of its own on its engine (Docker: `cordon-volume.<name>`), so a cordon
 * volume never shares a name with anything else there.
 */
export const VOLUME_NAME_PATTERN = /^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/** The largest `sizeMb` a volume may be created with: 1 TiB. */
export const VOLUME_MAX_SIZE_MB = 1_048_576

/** What `provider.volumes.create()` takes. */
export interface SandboxVolumeCreateOptions {
  /** See {@link VOLUME_NAME_PATTERN}. */
  readonly name: string
  /**
   * The most the volume may hold, in MiB: a sandbox that mounts it
   * read-write is held to it (past it, its writes fail and the sandbox
   * ends; what the volume held stays).
   */
  readonly sizeMb: number
  readonly signal?: AbortSignal
}

/** A sandbox that mounts a volume now, and how. */
export interface SandboxVolumeUser {
  readonly sandboxId: string
  readonly access: 'read-write' | 'read-only'
}

/** A named persistent volume, as `provider.volumes.list()` reports it. */
export interface SandboxVolumeInfo {
  readonly name: string
  readonly sizeMb: number
  /** When it was created, in ms since the epoch. */
  readonly createdAt: number
  /**
   * When a sandbox last mounted or released it (its creation when none has
   * yet), in ms since the epoch: what `cordon gc`'s retention counts from.
   */
  readonly lastUsedAt: number
  /** The live sandboxes that mount it; empty when none does. */
  readonly usedBy: readonly SandboxVolumeUser[]
}

/**
 * Named persistent volumes: storage that outlives every sandbox and every
 * host process, kept on the backend's engine until removed (`remove()`, or
 * `cordon gc` with a retention the host sets). A layout mounts one with the
 * source `{ type: 'volume', name }`: read-write in a writable role (one
 * sandbox at a time), read-only in a read-only role (any number at once).
 * On a backend that declares `volumes: false` every member is refused with
 * `SandboxControlRefusedError` naming `volumes`.
 */
export interface SandboxVolumes {
  /**
   * Creates an empty volume. A name already taken (by a cordon volume, or by
   * anything else on the engine in cordon's namespace) is refused with
   * `SandboxVolumeError` (`exists`); a malformed name or size with
   * `SandboxConfigValidationError`.
   */
  create(options: SandboxVolumeCreateOptions): Promise<SandboxVolumeInfo>
  /** Every cordon volume on the engine, by name. */
  list(options?: { readonly signal?: AbortSignal }): Promise<SandboxVolumeInfo[]>
  /**
   * Removes a volume and everything in it. Refused with `SandboxVolumeError`
   * (`in-use`, naming the sandboxes) while a live sandbox mounts it, and
   * (`not-found`) when there is no cordon volume of that name.
   */
  remove(name: string, options?: { readonly signal?: AbortSignal }): Promise<void>
}

/** What a backend that keeps volumes implements; the provider validates before calling it. */
export type SandboxBackendVolumes = SandboxVolumes

/** Refuses a malformed volume name with the typed error that locates it. */
export function checkVolumeName(name: unknown, at = 'name'): string {
  if (typeof name !== 'string' || !VOLUME_NAME_PATTERN.test(name)) {
    throw new SandboxConfigValidationError('volume', [
      {
        path: at,
        message: `volume name ${JSON.stringify(name)} must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit, with no ".."`,
      },
    ])
  }
  return name
}

/** Validates `create()`'s options: every problem at once. */
export function checkVolumeCreate(options: unknown): { name: string; sizeMb: number } {
  const raw = (typeof options === 'object' && options !== null ? options : {}) as Record<
    string,
    unknown
  >
  const problems: { path: string; message: string }[] = []
  if (typeof raw.name !== 'string' || !VOLUME_NAME_PATTERN.test(raw.name))
    problems.push({
      path: 'name',
      message: `volume name ${JSON.stringify(raw.name)} must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit, with no ".."`,
    })
  const size = raw.sizeMb
  if (typeof size !== 'number' || !Number.isInteger(size) || size <= 0 || size > VOLUME_MAX_SIZE_MB)
    problems.push({
      path: 'sizeMb',
      message: `expected a whole number of MiB from 1 to ${VOLUME_MAX_SIZE_MB}`,
    })
  for (const key of Object.keys(raw))
    if (!['name', 'sizeMb', 'signal'].includes(key))
      problems.push({ path: key, message: 'unknown option' })
  if (problems.length > 0) throw new SandboxConfigValidationError('volume', problems)
  return { name: raw.name as string, sizeMb: size as number }
}

/** The refusal of every volume operation on a backend that declares `volumes: false`. */
export function volumesRefusal(backend: string): SandboxControlRefusedError {
  return new SandboxControlRefusedError(
    'volumes',
    backend,
    'this backend keeps no named volumes; use a backend whose definition declares volumes: true',
  )
}
