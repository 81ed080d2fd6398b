import type { SandboxBackendUsage } from '@cordon/core'
import type Docker from 'dockerode'

/**
 * A sandbox's CPU time and memory as the engine's cgroup accounting has
 * them: under runc the container's processes (cordon's agent included),
 * under gVisor the whole sandbox, its kernel included, which is what the
 * host pays for. One sample, not the engine's two-sample stream.
 */
export async function engineUsage(
  docker: Docker,
  containerId: string,
  signal?: AbortSignal,
): Promise<Partial<SandboxBackendUsage>> {
  const stats = (await docker.getContainer(containerId).stats({
    stream: false,
    'one-shot': true,
    ...(signal ? { abortSignal: signal } : {}),
  } as {
    stream: false
  })) as unknown as EngineStats
  const usage: { cpuTimeMs?: number; memoryBytes?: number; memoryPeakBytes?: number } = {}
  const cpu = stats.cpu_stats?.cpu_usage?.total_usage
  if (typeof cpu === 'number') usage.cpuTimeMs = Math.round(cpu / 1e6)
  const memory = stats.memory_stats?.usage
  if (typeof memory === 'number') usage.memoryBytes = memory
  const peak = stats.memory_stats?.max_usage
  if (typeof peak === 'number') usage.memoryPeakBytes = peak
  return usage
}

interface EngineStats {
  readonly cpu_stats?: { readonly cpu_usage?: { readonly total_usage?: number } }
  readonly memory_stats?: { readonly usage?: number; readonly max_usage?: number }
}
