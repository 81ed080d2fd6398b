/**
 * The control-plane wire shapes, as specified in `openapi.yaml` at the root of
 * this package. An orchestrator implements that API; this package is its client.
 */

/** Where and how to reach the agent inside a guest. */
export type SandboxAgentEndpoint =
  /** A unix socket on the host this backend runs on, served by the agent (or a relay to it). */
  | { readonly kind: 'unix'; readonly path: string }
  /**
   * Firecracker's host side of a guest's vsock device: a unix socket where a
   * client writes `CONNECT <port>\n` and reads `OK <host port>\n` before the
   * byte stream reaches the guest's listener on `port`.
   */
  | { readonly kind: 'vsock'; readonly udsPath: string; readonly port?: number }
  /** A TLS relay in front of the guest that requires a client certificate (the backend's `mtls`). */
  | {
      readonly kind: 'tls'
      readonly host: string
      readonly port: number
      readonly servername?: string
    }
  /**
   * A per-host mutual-TLS relay in front of many guests (the backend's
   * `mtls` certificate): the client's first line `SANDBOX <sandboxId>` picks
   * the guest, then the relay only moves bytes.
   */
  | {
      readonly kind: 'mtls'
      readonly host: string
      readonly port: number
      readonly sandboxId: string
    }

/**
 * Names a per-agent snapshot: chosen by the client when it asks for the
 * snapshot (`snapshotSandbox`), named again by a create that resumes it.
 * Each part is 1 to 128 letters, digits, `.`, `_` or `-`.
 */
export interface AgentSnapshotReference {
  readonly orgId: string
  readonly agentId: string
  readonly version: string
}

export interface CreateSandboxRequestBody {
  /** Chosen by the client, so it can delete a guest whose create it abandoned. */
  readonly sandboxId: string
  readonly template?: string
  /** Start from this snapshot (its filesystem, and its processes for a memory snapshot). */
  readonly agentSnapshot?: AgentSnapshotReference
  readonly memoryLimitMb: number
  readonly maxProcesses: number
  /** The guest's lifetime; the orchestrator deletes it when it runs out. */
  readonly timeoutMs?: number
  /**
   * Hosts the guest may reach. Omitted: no restriction (allow-all). Empty:
   * no network at all (deny-all). Otherwise exactly these hosts (a static
   * list, or what a resolver returned at create time).
   */
  readonly egressAllowlist?: readonly string[]
  /** Guest vsock port the agent listens on. */
  readonly agentVsockPort: number
  /** The per-sandbox secret the agent must demand; the orchestrator hands it to the guest and nowhere else. */
  readonly agentSecret: string
  /** Owner labels the orchestrator stores with the guest, so leftovers can be found. */
  readonly labels: Readonly<Record<string, string>>
}

export interface CreateSandboxResponseBody {
  readonly sandboxId: string
  /** The writable outputs directory inside the guest. */
  readonly rootDir: string
  readonly agent: SandboxAgentEndpoint
}

/** A guest as `GET /v1/sandboxes/{sandboxId}` and `GET /v1/sandboxes` describe it. */
export interface SandboxDescriptionBody {
  readonly sandboxId: string
  readonly state: 'creating' | 'running' | 'paused'
  readonly labels: Readonly<Record<string, string>>
  /** As the create answered them; present once the guest runs. */
  readonly rootDir?: string
  readonly agent?: SandboxAgentEndpoint
  /** ms since the epoch, when the control plane says. */
  readonly createdAt?: number
}

/** Error body of every non-2xx response. */
export interface ControlPlaneErrorBody {
  readonly error: {
    /** `unauthorized`, `invalid-request`, `control-refused`, `conflict`, `not-found`, `unavailable`, ... */
    readonly code: string
    readonly message: string
    /** For `control-refused`: the control, e.g. `egress` or `memoryLimitMb`. */
    readonly control?: string
    readonly reason?: string
  }
}

/** What `pauseSandbox` and `resumeSandbox` answer. */
export interface SandboxStateBody {
  readonly sandboxId: string
  readonly state: 'running' | 'paused'
}

export interface CreateSnapshotRequestBody {
  /** The client's name for the snapshot; a create's `agentSnapshot` names it again. */
  readonly agentSnapshot: AgentSnapshotReference
  /** Capture memory and running processes too (refused where the orchestrator cannot). */
  readonly memory?: boolean
  /** Owner labels kept with the snapshot, so leftovers can be found. */
  readonly labels: Readonly<Record<string, string>>
}

/** A snapshot the control plane holds (`Snapshot` in openapi.yaml). */
export interface SnapshotBody {
  readonly agentSnapshot: AgentSnapshotReference
  readonly sourceSandboxId: string
  readonly template?: string
  /** Whether memory and processes were captured. */
  readonly memory: boolean
  readonly sizeBytes: number
  readonly createdAt: string
  readonly labels: Readonly<Record<string, string>>
}
