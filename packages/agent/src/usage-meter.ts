import { readFileSync } from 'node:fs'
import { missingCapabilities } from './effective-capabilities.js'
import { heldDeletedFiles } from './held-files.js'
import { readProcessTable } from './process-table.js'
import type { UsageOkMessage } from './protocol/messages.js'
import { treeBytes } from './tree-size.js'
import { type ActAs, actAsItself } from './user-identity.js'

/**
 * What a sandbox uses, measured from inside: its user's processes and
 * threads, the disk its writable directories' regular files take (each the
 * larger of its size and its allocation; walked as the agent where it holds
 * CAP_DAC_OVERRIDE, so whatever the files' modes, else as the user), with
 * the deleted files its processes still hold open, and the CPU time and
 * memory of the agent's cgroup where one is readable (a microVM guest's
 * whole system, or a container's under runc; gVisor shows none, and a
 * backend with a better view, such as the Docker engine's, supplies its own).
 */
export async function measureUsage(
  uid: number | undefined,
  writeRoots: readonly string[],
  actAs: ActAs,
): Promise<UsageOkMessage> {
  const processes = readProcessTable()
    .filter((entry) => uid === undefined || entry.uid === uid)
    .reduce((sum, entry) => sum + entry.threads, 0)
  const walkAs = missingCapabilities(['DAC_OVERRIDE']).length === 0 ? actAsItself : actAs
  let diskBytes = 0
  for (const root of writeRoots) diskBytes += await treeBytes(root, walkAs)
  if (uid !== undefined)
    for (const held of heldDeletedFiles(uid, writeRoots).values()) diskBytes += held.bytes
  return { type: 'usage-ok', processes, diskBytes, ...readCgroup() }
}

/** cgroup v2, then v1; nothing when neither is readable. */
function readCgroup(): Pick<UsageOkMessage, 'cpuTimeMs' | 'memoryBytes' | 'memoryPeakBytes'> {
  const read = (path: string): number | undefined => {
    try {
      const value = Number(readFileSync(path, 'utf8').trim())
      return Number.isFinite(value) ? value : undefined
    } catch {
      return undefined
    }
  }
  const measured: { cpuTimeMs?: number; memoryBytes?: number; memoryPeakBytes?: number } = {}
  let cpuStat: string | undefined
  try {
    cpuStat = readFileSync('/sys/fs/cgroup/cpu.stat', 'utf8')
  } catch {}
  const usageUsec = cpuStat && /^usage_usec (\d+)/m.exec(cpuStat)
  const cpuNs = read('/sys/fs/cgroup/cpuacct/cpuacct.usage')
  if (usageUsec) measured.cpuTimeMs = Math.round(Number(usageUsec[1]) / 1000)
  else if (cpuNs !== undefined) measured.cpuTimeMs = Math.round(cpuNs / 1e6)
  const memory =
    read('/sys/fs/cgroup/memory.current') ?? read('/sys/fs/cgroup/memory/memory.usage_in_bytes')
  const peak =
    read('/sys/fs/cgroup/memory.peak') ?? read('/sys/fs/cgroup/memory/memory.max_usage_in_bytes')
  if (memory !== undefined) measured.memoryBytes = memory
  if (peak !== undefined) measured.memoryPeakBytes = peak
  return measured
}
