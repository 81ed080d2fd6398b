import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * Whose a memory snapshot's checkpoint is, before its record (the snapshot
 * image) exists: the owner labels the record will carry, written beside the
 * checkpoint before the engine writes it. A host that dies between the
 * checkpoint and its record leaves a checkpoint no image names; this file
 * lets a scoped garbage collection place it in its scope and judge its
 * owner (garbage-collect.ts). It goes with the checkpoint (memory-snapshot.ts).
 */

/** The owner file of snapshot `id`'s checkpoint, in the checkpoints' directory. */
export function checkpointOwnerPath(checkpointsDir: string, id: string): string {
  return join(checkpointsDir, `${id}.owner.json`)
}

/** Writes the owner file whole (renamed into place: a reader never sees half of it). */
export function writeCheckpointOwner(
  checkpointsDir: string,
  id: string,
  labels: Readonly<Record<string, string>>,
): void {
  mkdirSync(checkpointsDir, { recursive: true, mode: 0o700 })
  const path = checkpointOwnerPath(checkpointsDir, id)
  writeFileSync(`${path}.tmp`, JSON.stringify(labels), { mode: 0o600 })
  renameSync(`${path}.tmp`, path)
}

/** The owner labels recorded for snapshot `id`'s checkpoint, if there are any. */
export function readCheckpointOwner(
  checkpointsDir: string,
  id: string,
): Record<string, string> | undefined {
  try {
    const parsed: unknown = JSON.parse(
      readFileSync(checkpointOwnerPath(checkpointsDir, id), 'utf8'),
    )
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined
    const entries = Object.entries(parsed).filter(
      (entry): entry is [string, string] => typeof entry[1] === 'string',
    )
    return Object.fromEntries(entries)
  } catch {
    return undefined
  }
}

export function removeCheckpointOwner(checkpointsDir: string, id: string): void {
  const path = checkpointOwnerPath(checkpointsDir, id)
  rmSync(path, { force: true })
  rmSync(`${path}.tmp`, { force: true })
}
