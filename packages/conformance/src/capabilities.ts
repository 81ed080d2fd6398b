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
  /** `maxProcesses` is enforced: fork fails past it. */
  readonly processLimit: boolean
  /** `deny-all` egress leaves the sandbox with no network at all. */
  readonly denyAllNetwork: boolean
}

export const ALL_CAPABILITIES: SandboxConformanceCapabilities = {
  memoryLimit: true,
  oomReporting: true,
  processLimit: true,
  denyAllNetwork: true,
}
