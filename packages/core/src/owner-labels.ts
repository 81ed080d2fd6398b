/** Label keys and owner identity cordon puts on every engine resource it creates, so a dead host's leftovers can be found and a live one's never touched. */
import { readFileSync, readlinkSync } from 'node:fs'
import { hostname } from 'node:os'

/** Label keys cordon sets on every resource it creates. */
export const LABEL = {
  managed: 'cordon.managed',
  /** For people reading the labels; it decides nothing (see judgeOwner). */
  ownerHost: 'cordon.owner.host',
  ownerPid: 'cordon.owner.pid',
  ownerStart: 'cordon.owner.start',
  /** The kernel's boot id: one boot of one machine, the same in every container on it. */
  ownerBoot: 'cordon.owner.boot',
  /** The owner's PID namespace, as its /proc/self/ns/pid link reads (`pid:[inode]`). */
  ownerPidNamespace: 'cordon.owner.pid-ns',
  /** The owner's time namespace (`time:[inode]`), or `none` on a kernel without them. */
  ownerTimeNamespace: 'cordon.owner.time-ns',
  provider: 'cordon.provider',
  sandbox: 'cordon.sandbox',
  role: 'cordon.role',
  expires: 'cordon.expires',
  /**
   * `1` on a detached sandbox: it outlives its owner by design, so a dead
   * owner does not make it garbage; its end (`expires`) does.
   */
  detached: 'cordon.detached',
} as const

export type ResourceRole =
  | 'sandbox'
  | 'workspace'
  | 'gateway'
  | 'relay'
  | 'network'
  | 'egress-sockets'
  /** The directory of a gVisor agent's host-backed socket (an anonymous volume, gone with its container). */
  | 'agent-socket'
  | 'snapshot'
  /** A named persistent volume: outlives its owner; `cordon gc` removes it only past a retention. */
  | 'volume'
  /** When a named volume was last mounted or released (garbage-collect.ts reads it). */
  | 'volume-use'

/**
 * Identifies a process across pid reuse: its start time in clock ticks since
 * boot (field 22 of /proc/<pid>/stat), or `undefined` off Linux or when the
 * process does not exist.
 */
export function processStartToken(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The command name (field 2) may contain spaces and parentheses; fields after the last ')' are fixed.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return fields[19]
  } catch {
    return undefined
  }
}

/**
 * Where a pid and a start token name exactly one process: one boot of one
 * kernel, one PID namespace (pids are numbered per namespace), and one time
 * namespace (the kernel shifts the start times a process reads by its time
 * namespace's boot-time offset). The hostname is no part of it: containers
 * given one `--hostname`, or two machines named alike, share a name and not
 * their processes.
 *
 * A namespace's inode number is unique only while the namespace exists, and
 * the kernel hands freed numbers out again (the initial namespaces' numbers
 * are the same on every boot); with the boot id beside it, a reused number
 * means the namespace the owner ran in has ended, so the owner has too, and
 * no process of the new namespace can carry the owner's start token.
 */
export interface PidScope {
  readonly boot: string
  readonly pidNamespace: string
  readonly timeNamespace: string
}

/**
 * This process's own PidScope, or `undefined` when it cannot judge pids: off
 * Linux, or when /proc is not its own PID namespace's (after `unshare --pid`
 * without `--mount-proc`, /proc lists the parent namespace's processes under
 * their numbers there, so a pid looked up in it names someone else).
 */
export function ownPidScope(): PidScope | undefined {
  try {
    if (readlinkSync('/proc/self') !== String(process.pid)) return undefined
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()
    const pidNamespace = readlinkSync('/proc/self/ns/pid')
    let timeNamespace = 'none'
    try {
      timeNamespace = readlinkSync('/proc/self/ns/time')
    } catch (error) {
      // Absent only on a kernel built without time namespaces, where no offsets exist.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    }
    return boot === '' ? undefined : { boot, pidNamespace, timeNamespace }
  } catch {
    return undefined
  }
}

export function ownerLabels(providerId: string): Record<string, string> {
  const scope = ownPidScope()
  return {
    [LABEL.managed]: '1',
    [LABEL.ownerHost]: hostname(),
    [LABEL.ownerPid]: String(process.pid),
    // Without a scope no judge could use it, and /proc may be another namespace's.
    [LABEL.ownerStart]: (scope && processStartToken(process.pid)) ?? 'unknown',
    [LABEL.ownerBoot]: scope?.boot ?? 'unknown',
    [LABEL.ownerPidNamespace]: scope?.pidNamespace ?? 'unknown',
    [LABEL.ownerTimeNamespace]: scope?.timeNamespace ?? 'unknown',
    [LABEL.provider]: providerId,
  }
}

export type OwnerState = 'alive' | 'gone' | 'unknown'

/** Why an owner's state cannot be judged from the process asking. */
export type UnjudgedOwnerReason =
  /** The labels carry no complete PidScope: made by a cordon that did not record one, or by an owner that could not read its own. */
  | 'unrecorded'
  /** The process asking has no PidScope of its own (see ownPidScope). */
  | 'unjudgeable-here'
  /** Another boot id: another machine, or this one before it last booted (the two look alike). */
  | 'other-boot'
  | 'other-pid-namespace'
  | 'other-time-namespace'

export type OwnerJudgement =
  | { readonly state: 'alive' | 'gone' }
  | { readonly state: 'unknown'; readonly reason: UnjudgedOwnerReason }

/**
 * Whether the process that created a resource still runs, as far as the
 * process asking can tell. It can tell only for an owner in its own
 * PidScope; any other owner is `unknown`, and gc leaves its resources alone
 * unless they have expired, because an owner cordon cannot see may be alive.
 */
export function judgeOwner(labels: Readonly<Record<string, string>>): OwnerJudgement {
  const pid = Number(labels[LABEL.ownerPid])
  const start = labels[LABEL.ownerStart]
  const recorded = {
    boot: labels[LABEL.ownerBoot],
    pidNamespace: labels[LABEL.ownerPidNamespace],
    timeNamespace: labels[LABEL.ownerTimeNamespace],
  }
  // Labels without a scope cannot be placed: a pid from another namespace
  // that is free in this one would read as a dead owner, and its live
  // sandboxes would be removed. So they stay, as another machine's do.
  if (
    !Number.isInteger(pid) ||
    pid <= 0 ||
    [start, ...Object.values(recorded)].some((value) => value === undefined || value === 'unknown')
  )
    return { state: 'unknown', reason: 'unrecorded' }
  const own = ownPidScope()
  if (!own) return { state: 'unknown', reason: 'unjudgeable-here' }
  if (recorded.boot !== own.boot) return { state: 'unknown', reason: 'other-boot' }
  if (recorded.pidNamespace !== own.pidNamespace)
    return { state: 'unknown', reason: 'other-pid-namespace' }
  if (recorded.timeNamespace !== own.timeNamespace)
    return { state: 'unknown', reason: 'other-time-namespace' }

  const current = processStartToken(pid)
  if (current !== undefined) return { state: current === start ? 'alive' : 'gone' }
  // /proc may hide another user's processes (`hidepid`); a signal check still finds them.
  try {
    process.kill(pid, 0)
    return { state: 'alive' }
  } catch (error) {
    return { state: (error as NodeJS.ErrnoException).code === 'EPERM' ? 'alive' : 'gone' }
  }
}

/** judgeOwner's state alone. */
export function ownerState(labels: Readonly<Record<string, string>>): OwnerState {
  return judgeOwner(labels).state
}
