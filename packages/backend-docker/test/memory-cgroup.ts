import { readFileSync } from 'node:fs'

/**
 * The host's memory cgroup of a process (a container's init), found through
 * its `/proc` entry: cgroup v1 (these machines) or v2. Tests read a sandbox's
 * real charge and limit here rather than trust what the engine reports.
 */
export interface MemoryCgroup {
  /** Bytes charged now. */
  usage(): number
  /** The most ever charged (v1 `max_usage_in_bytes`, v2 `memory.peak`). */
  peak(): number
  /** The limit in bytes. */
  limit(): number
}

export function memoryCgroupOf(pid: number): MemoryCgroup {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n')
  const read = (file: string): number => Number(readFileSync(file, 'utf8').trim())
  const v1 = lines.find((line) => line.split(':')[1]?.split(',').includes('memory'))
  if (v1) {
    const dir = `/sys/fs/cgroup/memory${v1.split(':')[2]}`
    return {
      usage: () => read(`${dir}/memory.usage_in_bytes`),
      peak: () => read(`${dir}/memory.max_usage_in_bytes`),
      limit: () => read(`${dir}/memory.limit_in_bytes`),
    }
  }
  const v2 = lines.find((line) => line.startsWith('0::'))
  if (!v2) throw new Error(`process ${pid} has no memory cgroup in /proc/${pid}/cgroup`)
  const dir = `/sys/fs/cgroup${v2.slice(3)}`
  return {
    usage: () => read(`${dir}/memory.current`),
    peak: () => read(`${dir}/memory.peak`),
    limit: () => read(`${dir}/memory.max`),
  }
}
