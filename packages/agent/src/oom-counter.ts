import { readFileSync } from 'node:fs'

/**
 * Best-effort reading of the kernel's OOM-kill counter for the cgroup the agent
 * runs in: `memory.events` (cgroup v2) or `memory.oom_control` (v1), both of
 * which carry an `oom_kill N` line. Returns undefined where neither is readable,
 * in which case `oomKilled` is never reported.
 */
export function readOomKillCount(): number | undefined {
  for (const file of candidateFiles()) {
    try {
      const match = /^oom_kill (\d+)$/m.exec(readFileSync(file, 'utf8'))
      if (match) {
        // The one that answered is the one to read: every command reads it twice.
        cached = [file]
        return Number(match[1])
      }
    } catch {
      // Try the next place.
    }
  }
  return undefined
}

let cached: string[] | undefined

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
