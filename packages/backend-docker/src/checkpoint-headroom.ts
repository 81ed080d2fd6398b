import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type Docker from 'dockerode'

/**
 * Memory for gVisor to checkpoint in.
 *
 * Under gVisor the sandbox's kernel (the sentry) lives in the container's
 * memory cgroup, and saving it takes memory of its own beside the
 * sandbox's: more the more the sandbox's kernel holds, and this runsc keeps
 * the procfs entries of every process the sandbox ever ran. Measured here:
 * a busybox sandbox limited to 96 MiB that had run 250 commands peaked at
 * 182 MB while it was checkpointed; at its own limit the engine's OOM killer
 * ended the sandbox halfway through the save, and the host lost it. So the
 * cgroup's limit is raised for the checkpoint. The engine cannot do it
 * (`docker update` needs the runtime's `update`, which this runsc lacks), so
 * the host writes the cgroup's files itself, as root on the engine's
 * machine, which a memory snapshot needs anyway.
 *
 * The raise lasts only as long as the container: a checkpoint ends it, and
 * the start from the checkpoint makes a new cgroup from the container's own
 * (unchanged) limit. If the checkpoint fails with the container still
 * running, the limit is put back. In the moment between the raise and the
 * checkpoint stopping the sandbox's processes, they could take up to the
 * headroom more than their limit; the headroom is bounded for that reason.
 */

/** How much more than its limit a sandbox's cgroup may hold while it is checkpointed. */
export function checkpointHeadroomBytes(limitBytes: number): number {
  return Math.max(limitBytes, 512 * 1024 * 1024)
}

interface MemoryCgroup {
  /** The files to write, in the order that raises the limit (reverse to lower it). */
  readonly files: readonly string[]
}

/** The container's memory cgroup on the host, found from its first process. */
function memoryCgroupOf(pid: number): MemoryCgroup | undefined {
  let lines: string[]
  try {
    lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')
  } catch {
    return undefined
  }
  for (const line of lines) {
    const [, controllers, path] = line.split(':')
    if (path === undefined) continue
    // cgroup v1: the memory controller's own hierarchy; the swap limit
    // (memsw) must never be below the memory limit, so it goes up first.
    if (controllers?.split(',').includes('memory')) {
      const dir = join('/sys/fs/cgroup/memory', path)
      return {
        files: [join(dir, 'memory.memsw.limit_in_bytes'), join(dir, 'memory.limit_in_bytes')],
      }
    }
  }
  // cgroup v2: one hierarchy, `0::<path>`; swap has a limit of its own.
  const unified = lines.find((line) => line.startsWith('0::'))
  if (unified) return { files: [join('/sys/fs/cgroup', unified.slice(3), 'memory.max')] }
  return undefined
}

function readLimit(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim()
  } catch {
    return undefined
  }
}

/**
 * Runs `work` (the checkpoint) with the container's memory cgroup raised by
 * the headroom, and puts the old limits back after it if the container
 * still has them. Without a limit, a process or a cgroup this host can find
 * and write, `work` runs as it would have.
 */
export async function withCheckpointHeadroom<T>(
  docker: Docker,
  containerId: string,
  work: () => Promise<T>,
): Promise<T> {
  const info = await docker
    .getContainer(containerId)
    .inspect()
    .catch(() => undefined)
  const limit = info?.HostConfig?.Memory ?? 0
  const pid = info?.State?.Pid ?? 0
  const cgroup = limit > 0 && pid > 0 ? memoryCgroupOf(pid) : undefined
  const raised = BigInt(limit) + BigInt(checkpointHeadroomBytes(limit))
  // Only limits below the raised one are raised (a swap limit may be unlimited).
  const changed: Array<readonly [string, string]> = []
  for (const file of cgroup?.files ?? []) {
    const value = readLimit(file)
    if (value === undefined || value === 'max' || BigInt(value) >= raised) continue
    try {
      writeFileSync(file, String(raised))
      changed.push([file, value])
    } catch {
      // Not this host's to write (another cgroup layout, or no root): as before.
      break
    }
  }
  try {
    return await work()
  } finally {
    // Lowered in the reverse order; gone with the container after a checkpoint.
    for (const [file, value] of changed.reverse()) {
      try {
        writeFileSync(file, value)
      } catch {
        // The cgroup went with the container.
      }
    }
  }
}
