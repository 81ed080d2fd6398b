/** Label keys and owner identity cordon puts on every engine resource it creates, so a dead host's leftovers can be found and a live one's never touched. */
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'

/** Label keys cordon sets on every resource it creates. */
export const LABEL = {
  managed: 'cordon.managed',
  ownerHost: 'cordon.owner.host',
  ownerPid: 'cordon.owner.pid',
  ownerStart: 'cordon.owner.start',
  provider: 'cordon.provider',
  sandbox: 'cordon.sandbox',
  role: 'cordon.role',
  expires: 'cordon.expires',
} as const

export type ResourceRole =
  | 'sandbox'
  | 'workspace'
  | 'gateway'
  | 'relay'
  | 'network'
  | 'egress-sockets'

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

export function ownerLabels(providerId: string): Record<string, string> {
  return {
    [LABEL.managed]: '1',
    [LABEL.ownerHost]: hostname(),
    [LABEL.ownerPid]: String(process.pid),
    [LABEL.ownerStart]: processStartToken(process.pid) ?? 'unknown',
    [LABEL.provider]: providerId,
  }
}

export type OwnerState = 'alive' | 'gone' | 'unknown'

/**
 * Whether the process that created a resource still runs. A resource made on
 * another host is `unknown` (cordon cannot see that host's processes) and gc
 * leaves it alone unless it has expired.
 */
export function ownerState(labels: Readonly<Record<string, string>>): OwnerState {
  if (labels[LABEL.ownerHost] !== hostname()) return 'unknown'
  const pid = Number(labels[LABEL.ownerPid])
  if (!Number.isInteger(pid) || pid <= 0) return 'unknown'
  const recorded = labels[LABEL.ownerStart]
  const current = processStartToken(pid)
  if (current === undefined) {
    try {
      process.kill(pid, 0)
      return recorded === 'unknown' ? 'alive' : 'gone'
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'EPERM' ? 'alive' : 'gone'
    }
  }
  return recorded === 'unknown' || recorded === current ? 'alive' : 'gone'
}
