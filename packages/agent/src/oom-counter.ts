import { readFileSync } from 'node:fs'

/**
 * Best-effort reading of the kernel's OOM-kill counter for the cgroup the agent
 * runs in: `memory.events` (cgroup v2) or `memory.oom_control` (v1), both of
 * which carry an `oom_kill N` line. Returns undefined where neither is readable,
 * in which case `oomKilled` is never reported.
 */
export function readOomKillCount(): number | undefined {
  if (absent) return undefined
  let everyOneMissing = true
  for (const file of candidateFiles()) {
    try {
      const match = /^oom_kill (\d+)$/m.exec(readFileSync(file, 'utf8'))
      if (match) {
        // The one that answered is the one to read: every command reads it.
        cached = [file]
        return Number(match[1])
      }
      everyOneMissing = false
    } catch (error) {
      if (!isMissing(error)) everyOneMissing = false
      // Try the next place.
    }
  }
  // Where no such file exists (gVisor shows no memory cgroup inside), none
  // will later: every command asked again, at a system call a place, each a
  // round trip through gVisor's kernel (bench/misses.md). A read that failed
  // for any other reason (no descriptor left, say) is tried again next time.
  if (everyOneMissing) absent = true
  return undefined
}

/**
 * Whether a command that ended so was killed by the memory cgroup's OOM
 * killer: a SIGKILL that no deadline and no cancel of cordon's sent, and a
 * counter that moved since `before` (read as the command started). The
 * counter is read again only for such an end, not after every command.
 */
export function endedByOomKill(
  before: number | undefined,
  end: { signal: NodeJS.Signals | null; timedOut: boolean; aborted: boolean },
): boolean {
  if (end.signal !== 'SIGKILL' || end.timedOut || end.aborted || before === undefined) return false
  const after = readOomKillCount()
  return after !== undefined && after > before
}

let cached: string[] | undefined
let absent = false

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code
  return code === 'ENOENT' || code === 'ENOTDIR'
}

function candidateFiles(): string[] {
  if (cached) return cached
  const files: string[] = []
  try {
    for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
      const [, controllers, path] = line.split(':')
      if (path === undefined) continue
      if (controllers === '') files.push(`/sys/fs/cgroup${path === '/' ? '' : path}/memory.events`)
      else if (controllers?.split(',').includes('memory'))
        files.push(`/sys/fs/cgroup/memory${path === '/' ? '' : path}/memory.oom_control`)
    }
  } catch {
    // No /proc/self/cgroup: fall through to the namespace roots.
  }
  // With a cgroup namespace (or a container runtime's bind mount) the agent's own cgroup is the root.
  files.push('/sys/fs/cgroup/memory.events', '/sys/fs/cgroup/memory/memory.oom_control')
  cached = [...new Set(files)]
  return cached
}
