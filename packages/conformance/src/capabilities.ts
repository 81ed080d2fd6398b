import type { SandboxBackendUsage } from '@cordon/core'

/**
 * What a backend declares it enforces. The suite skips a case only when the
 * backend declares it cannot do that thing, and such a backend must then refuse
 * the control with `SandboxControlRefusedError` (which the suite checks).
 */
export interface SandboxConformanceCapabilities {
  /** `memoryLimitMb` is enforced: a process that exceeds it is killed. */
  readonly memoryLimit: boolean
  /** An out-of-memory kill is reported as `oomKilled` in the exec result. */
  readonly oomReporting: boolean
  /**
   * Only the offending process dies of an out-of-memory kill and the sandbox
   * goes on. When false (gVisor: the whole sandbox is one process to the host's
   * OOM killer), the exec must still end with `oomKilled` and later calls must
   * fail with `SandboxDestroyedError` instead of hanging.
   */
  readonly survivesOutOfMemory: boolean
  /** `maxProcesses` is enforced: fork fails past it. */
  readonly processLimit: boolean
  /** `deny-all` egress leaves the sandbox with no network at all. */
  readonly denyAllNetwork: boolean
  /**
   * `openTerminal` runs a program on a pseudo-terminal. When false it must
   * refuse with `SandboxControlRefusedError` naming `openTerminal`.
   */
  readonly terminal: boolean
  /**
   * `pause()` freezes every process of a sandbox and `resume()` continues
   * them. When false both must refuse with `SandboxControlRefusedError`
   * naming the control and the backend.
   */
  readonly pause: boolean
  /**
   * `watchDirectory` with `external: true` reports changes made from outside
   * the sandbox. When false it must refuse with `SandboxControlRefusedError`
   * naming `watchDirectory.external`.
   */
  readonly externalWatch: boolean
  /** The fields of `stats()` the backend measures; the others must be absent, never made up. */
  readonly measuredUsage: readonly MeasuredUsageField[]
}

export type MeasuredUsageField = keyof SandboxBackendUsage

export const ALL_CAPABILITIES: SandboxConformanceCapabilities = {
  memoryLimit: true,
  oomReporting: true,
  survivesOutOfMemory: true,
  processLimit: true,
  denyAllNetwork: true,
  terminal: true,
  pause: true,
  externalWatch: true,
  measuredUsage: ['cpuTimeMs', 'memoryBytes', 'memoryPeakBytes', 'processes', 'diskBytes'],
}
