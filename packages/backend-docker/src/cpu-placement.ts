import { createHash } from 'node:crypto'

/**
 * The cores a sandbox may run on, so that what a program inside counts as
 * its CPUs (`nproc`, `os.availableParallelism()`, a thread pool's default
 * size) matches its CPU limit instead of the engine's whole machine: a build
 * tool that starts 64 workers in a one-CPU sandbox runs slower, and in less
 * memory, than one that starts one. `ceil(cpus)` consecutive cores, starting
 * at a core derived from the sandbox's id so that sandboxes spread over the
 * machine; the CPU quota (`NanoCpus`) still bounds the time they get. None
 * when the limit covers every core.
 */
export function cpuSet(cpus: number, engineCpus: number, sandboxId: string): string | undefined {
  const count = Math.ceil(cpus)
  if (!Number.isInteger(engineCpus) || engineCpus < 1 || count >= engineCpus) return undefined
  const first = createHash('sha256').update(sandboxId).digest().readUInt32BE(0) % engineCpus
  const cores = Array.from({ length: count }, (_, index) => (first + index) % engineCpus)
  return cores.sort((a, b) => a - b).join(',')
}
