import { readFileSync } from 'node:fs'
import { randomBytes } from './random-bytes.js'

/**
 * The supplementary group that tags every process of one exec.
 *
 * A command started as the sandbox's user gets one supplementary group, of
 * its exec alone, instead of none. Every process it starts inherits it, and
 * none can shed it: changing supplementary groups needs CAP_SETGID, which no
 * command has (and a user namespace cannot drop them either: the kernel
 * refuses setgroups() in one an unprivileged process made). Unlike the exec's
 * process group, session, parentage and marker variable, the tag survives
 * `setsid`, a double fork and `env -i`, so a kill finds every process of the
 * exec by it (process-tree.ts), read from /proc/<pid>/status.
 *
 * A tagged process gains the rights of its tag's group, so the tags must be
 * ids no one else has: they start at 2^31, above every id an account,
 * an image or a Docker container can have (the engine refuses a user or
 * group from 2^31 up; the kernel takes any id but 2^32 - 1), and above the
 * range cordon gives sandbox users (2^30 to 2^31, container-spec.ts in
 * @cordon/backend-docker), so a tag never lets a command into another
 * sandbox's files on a shared directory. A tag's group then owns nothing
 * unless the command itself gives it a file of its own. An id is reused
 * only after {@link EXEC_GROUP_COUNT} commands of one launcher: a process
 * an exec that ended by itself left running keeps its tag, and a later kill
 * of another exec must not take it.
 */
export const EXEC_GROUP_FIRST = 0x8000_0000
export const EXEC_GROUP_COUNT = 0x4000_0000

/**
 * The tag of the launcher's command `id` (its ids count up from 1), counted
 * from `offset`, which each launcher draws at random: two sandboxes' first
 * commands would otherwise carry the same group, and one sandbox could
 * prepare a setgid directory of that group on a directory both write to.
 */
export function execGroupOf(id: number, offset = 0): number {
  return EXEC_GROUP_FIRST + ((offset + id) % EXEC_GROUP_COUNT)
}

/** A launcher's random starting point in the tag range (see {@link execGroupOf}). */
export function randomExecGroupOffset(): number {
  return randomBytes(4).readUInt32LE(0) % EXEC_GROUP_COUNT
}

/**
 * Whether this process's user namespace maps the whole tag range. Where it
 * does not (an engine with user-namespace remapping maps only 65536 ids),
 * setgroups() would refuse a tag, so commands start untagged and a kill
 * finds their processes by the other means alone.
 */
export function execGroupsMapped(gidMapPath = '/proc/self/gid_map'): boolean {
  let map: string
  try {
    map = readFileSync(gidMapPath, 'latin1')
  } catch {
    return false
  }
  const last = EXEC_GROUP_FIRST + EXEC_GROUP_COUNT - 1
  for (const line of map.split('\n')) {
    const [inside, , count] = line.trim().split(/\s+/).map(Number)
    if (inside === undefined || count === undefined || Number.isNaN(inside + count)) continue
    if (inside <= EXEC_GROUP_FIRST && inside + count - 1 >= last) return true
  }
  return false
}
