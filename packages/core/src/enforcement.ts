import type { EgressPolicyKind } from './egress-policy.js'
import type { SandboxBackendUsage, SandboxEnvironment } from './sandbox.js'

/** A field of `stats()` a backend measures. */
export type MeasuredUsageField = keyof SandboxBackendUsage

/**
 * What a backend enforces, declared once in its definition. The provider
 * reads it: it applies no default a backend cannot enforce, refuses a
 * control a host names that the backend cannot enforce, and reports it as
 * `provider.enforcement`. The conformance suite reads the same declaration
 * and proves each `true` from inside a sandbox and each `false` as a refusal,
 * so a declaration that says more or less than the backend does fails it.
 */
export interface SandboxEnforcementDeclaration {
  /**
   * What stands between a sandbox's code and its host, in words a host can
   * log: `none` (the host's own user and kernel), `container` (namespaces,
   * cgroups, seccomp on the host's kernel), `user-space-kernel` (a kernel in user space between them),
   * `virtual-machine`, or a backend's own word.
   */
  readonly isolation: 'none' | 'container' | 'user-space-kernel' | 'virtual-machine' | (string & {})
  /** The `environment` its sandboxes report (the reference's values). */
  readonly environment: SandboxEnvironment
  /** `memoryLimitMb` is enforced: a process that exceeds it is killed. */
  readonly memoryLimit: boolean
  /** An out-of-memory kill is reported as `oomKilled` in the exec result. */
  readonly oomReporting: boolean
  /**
   * Only the offending process dies of an out-of-memory kill and the sandbox
   * goes on. When false (a runtime whose whole sandbox is one process to
   * the host's OOM killer), the exec still ends with `oomKilled` and later calls
   * fail with `SandboxDestroyedError` instead of hanging.
   */
  readonly survivesOutOfMemory: boolean
  /** `maxProcesses` is enforced: fork fails past it. */
  readonly processLimit: boolean
  /** The egress policy kinds the backend enforces; any other kind is refused. */
  readonly egress: readonly EgressPolicyKind[]
  /** `deny-all` leaves the sandbox with no network at all (not only a refusing proxy). */
  readonly denyAllNetwork: boolean
  /** `openTerminal` runs a program on a pseudo-terminal; when false it is refused. */
  readonly terminal: boolean
  /**
   * `pause()` freezes every process of a sandbox and `resume()` continues
   * them; when false both are refused naming the control and the backend.
   */
  readonly pause: boolean
  /**
   * `create({ detached: true, lifetimeMs })` makes a sandbox that outlives
   * its host process (ended by its lifetime on the engine's side), and
   * `provider.connect(id)` reaches it from another process; when false both
   * are refused naming `detached` and `connect`.
   */
  readonly reconnect: boolean
  /**
   * `watchDirectory` with `external: true` reports changes made to the
   * sandbox's files from outside it; when false it is refused naming
   * `watchDirectory.external`.
   */
  readonly externalWatch: boolean
  /**
   * `sandbox.snapshot()` captures the sandbox's files, `create({ snapshot })`
   * starts a new sandbox from them and `sandbox.fork()` makes independent
   * copies of a running one; when false all three are refused naming
   * `snapshot` or `fork`.
   */
  readonly snapshot: boolean
  /**
   * `snapshot({ memory: true })` captures the running processes too, and a
   * sandbox created from it continues them; when false it is refused naming
   * `snapshot.memory`.
   */
  readonly memorySnapshot: boolean
  /** The fields of `stats()` the backend measures; the others are absent, never made up. */
  readonly measuredUsage: readonly MeasuredUsageField[]
  /**
   * Named persistent volumes: `provider.volumes` creates, lists and removes
   * them, and a layout mount source `{ type: 'volume', name }` mounts one.
   * When false every member of `provider.volumes` and a volume source are
   * refused with `SandboxControlRefusedError` naming `volumes`.
   */
  readonly volumes: boolean
}

/** One limit as enforced for one sandbox. */
export interface SandboxEnforcedLimits {
  /** Memory limit in MiB; absent when the backend enforces none. */
  readonly memoryLimitMb?: number
  /** Process limit; absent when the backend enforces none. */
  readonly maxProcesses?: number
  /** CPU limit in cores, where the backend sets one. */
  readonly cpus?: number
  /** Cap on the bytes its writable mounts may hold, where the backend sets one. */
  readonly storageBytes?: number
}

/** A directory the sandbox sees, and how. */
export interface SandboxEnforcedMount {
  readonly path: string
  readonly access: 'read-write' | 'read-only'
  /** Programs on it cannot be run. */
  readonly noexec: boolean
}

/**
 * What the backend knows it enforces for one sandbox; the provider adds the
 * clocks it runs itself and hosts read the whole as `sandbox.enforced`.
 */
export interface SandboxBackendEnforcement {
  readonly backend: string
  readonly isolation: SandboxEnforcementDeclaration['isolation']
  /** The runtime the sandbox runs under, where there is one. */
  readonly runtime?: string
  readonly egress: {
    readonly kind: EgressPolicyKind
    /** The hosts a `static` policy allows, as given. */
    readonly allowedHosts?: readonly string[]
  }
  readonly limits: SandboxEnforcedLimits
  /** The numeric user and group the sandbox's commands run as, where the backend chose them. */
  readonly user?: { readonly uid: number; readonly gid: number }
  readonly mounts: readonly SandboxEnforcedMount[]
}

/**
 * What is enforced for one sandbox, machine-readably, so a host can log it
 * and assert it (`sandbox.enforced`). Every value is one the backend
 * enforces; a limit the backend does not enforce is absent, never a default.
 */
export interface SandboxEnforcementReport extends SandboxBackendEnforcement {
  /** Default timeout of each exec, in ms. */
  readonly execTimeoutMs: number
  /**
   * The sandbox is destroyed this many ms after it was handed out, time
   * paused (`pause()`) not counted; absent for none.
   */
  readonly lifetimeMs?: number
  /** The sandbox is destroyed after this many idle ms (paused time not counted); absent for none. */
  readonly idleTimeoutMs?: number
}
