import { lstat, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'

/** Clock ticks per second of /proc's CPU times (USER_HZ, 100 on every Linux port Node runs on). */
const TICKS_PER_SECOND = 100

interface ProcessEntry {
  readonly pid: number
  readonly ppid: number
  /** utime + stime + cutime + cstime, in ticks. */
  readonly cpuTicks: number
}

async function readEntry(pid: number): Promise<ProcessEntry | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'latin1')
    // The command name is in parentheses and may itself contain ") ".
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    if (fields[0] === 'Z' || fields[0] === 'X') return undefined
    const ticks = [11, 12, 13, 14].reduce((sum, index) => sum + Number(fields[index] ?? 0), 0)
    return { pid, ppid: Number(fields[1]), cpuTicks: ticks }
  } catch {
    return undefined
  }
}

async function carries(pid: number, needle: Buffer): Promise<boolean> {
  try {
    return (await readFile(`/proc/${pid}/environ`)).includes(needle)
  } catch {
    return false
  }
}

async function residentBytes(pid: number): Promise<number> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'latin1')
    const kib = /^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1]
    return kib === undefined ? 0 : Number(kib) * 1024
  } catch {
    return 0
  }
}

/**
 * The sandbox's own processes: the agent (`rootPid`), every descendant of
 * it, and every process that carries the sandbox's environment marker
 * (`variable=value`), which a command that detached itself from the tree
 * (`setsid`, its parent gone) still inherits. Nothing else of the host.
 */
export async function sandboxProcesses(
  rootPid: number,
  marker: { readonly variable: string; readonly value: string },
): Promise<ProcessEntry[]> {
  const all = new Map<number, ProcessEntry>()
  for (const name of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue
    const entry = await readEntry(Number(name))
    if (entry) all.set(entry.pid, entry)
  }
  const needle = Buffer.from(`${marker.variable}=${marker.value}\0`)
  const members: ProcessEntry[] = []
  for (const entry of all.values()) {
    if (descendsFrom(entry, rootPid, all) || (await carries(entry.pid, needle))) members.push(entry)
  }
  return members
}

function descendsFrom(
  entry: ProcessEntry,
  rootPid: number,
  all: ReadonlyMap<number, ProcessEntry>,
): boolean {
  let current: ProcessEntry | undefined = entry
  for (let depth = 0; current && depth < 4096; depth++) {
    if (current.pid === rootPid) return true
    if (current.ppid <= 1) return false
    current = all.get(current.ppid)
  }
  return false
}

/** Bytes of the regular files under `dir` (symbolic links not followed). */
export async function directoryBytes(dir: string): Promise<number> {
  let total = 0
  const pending = [dir]
  while (pending.length > 0) {
    const current = pending.pop()!
    let entries: import('node:fs').Dirent[]
    try {
      entries = await readdir(current, { withFileTypes: true })
    } catch {
      continue
    }
    for (const entry of entries) {
      const path = join(current, entry.name)
      if (entry.isDirectory()) pending.push(path)
      else if (entry.isFile())
        total += await lstat(path).then(
          (info) => info.size,
          () => 0,
        )
    }
  }
  return total
}

/**
 * What `stats()` reports for a local sandbox, measured on its own processes
 * and its workspace only: CPU time (live processes plus the children they
 * have reaped), resident memory, the number of processes, and the bytes in
 * the workspace.
 */
export async function measureLocalUsage(
  rootPid: number,
  marker: { readonly variable: string; readonly value: string },
  workspace: string,
): Promise<{ cpuTimeMs: number; memoryBytes: number; processes: number; diskBytes: number }> {
  const members = await sandboxProcesses(rootPid, marker)
  const memory = await Promise.all(members.map((entry) => residentBytes(entry.pid)))
  const ticks = members.reduce((sum, entry) => sum + entry.cpuTicks, 0)
  return {
    cpuTimeMs: Math.round((ticks * 1000) / TICKS_PER_SECOND),
    memoryBytes: memory.reduce((sum, bytes) => sum + bytes, 0),
    processes: members.length,
    diskBytes: await directoryBytes(workspace),
  }
}
