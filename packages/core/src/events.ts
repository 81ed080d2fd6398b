import type { SandboxEndReason } from './sandbox.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * Structured events a provider reports through its `onEvent` hook. Every event
 * carries a wall-clock timestamp; phases that take time carry `durationMs`, so
 * an OpenTelemetry exporter can turn `*.end` events into spans.
 */
export type SandboxEvent =
  | SandboxLifecycleEvent
  | SandboxEgressEvent
  | SandboxExecEvent
  | SandboxFileEvent

export type SandboxLifecyclePhase =
  | 'create.start'
  | 'create.ready'
  | 'create.failed'
  | 'destroy.start'
  | 'destroy.end'
  | 'pool.claim'
  | 'pool.refill'
  | 'pool.refill.failed'
  /** The lifetime ran out; the sandbox is being destroyed. */
  | 'expired'
  /** The idle timeout passed with nothing running; the sandbox is being destroyed. */
  | 'idle'
  /** The sandbox ended underneath its host (`endReason` says how); it is being cleaned up. */
  | 'ended'
  | 'oom'
  /**
   * `pause()` froze the sandbox (`durationMs`: how long freezing took), or
   * failed to (`error`).
   */
  | 'pause'
  /**
   * `resume()` continued the sandbox (`durationMs`: how long thawing took;
   * `pausedMs`: how long it was paused), or failed to (`error`).
   */
  | 'resume'
  /**
   * `snapshot()` stored a snapshot (`snapshotId`, `durationMs`), or failed
   * to (`error`).
   */
  | 'snapshot'
  /**
   * `fork()` made its sandboxes (`forkedSandboxIds`, `durationMs`), or
   * failed to (`error`; none was handed out).
   */
  | 'fork'
  /** A `resolver` policy's answer was refused (an invalid entry, an error, a timeout): everything is denied. */
  | 'egress.resolver-refused'
  /**
   * The image a create needs is not on the engine, and is being pulled
   * (`image`); then `image.pull.progress` as layers download (`pull`, at most
   * a few a second), and `image.pull.end` (with `durationMs`) or
   * `image.pull.failed` (with `error`). A pull serves every create that
   * waits for it, so these carry no `sandboxId`.
   */
  | 'image.pull.start'
  | 'image.pull.progress'
  | 'image.pull.end'
  | 'image.pull.failed'

export interface SandboxLifecycleEvent {
  readonly type: 'lifecycle'
  readonly phase: SandboxLifecyclePhase
  readonly sandboxId?: SandboxId
  /** The backend, as `tier:runtime`. */
  readonly backend: string
  readonly timestamp: number
  readonly durationMs?: number
  /**
   * On `create.ready` and `create.failed`: how long each step of the create
   * took, in ms, by the backend's name for it (`creating the container`,
   * `waiting for the agent`).
   */
  readonly steps?: Readonly<Record<string, number>>
  readonly error?: { readonly name: string; readonly code?: string; readonly message: string }
  /** On `resume`: how long the sandbox was paused, in ms. */
  readonly pausedMs?: number
  /** On `snapshot`: the snapshot taken. */
  readonly snapshotId?: string
  /** On `fork`: the sandboxes made. */
  readonly forkedSandboxIds?: readonly string[]
  /**
   * On `create.start`: the create fills the warm pool, so no caller has asked
   * for this sandbox yet (the one that claims it is told by `pool.claim`).
   */
  readonly pooled?: boolean
  /** On `destroy.end` and `ended`: why the sandbox ended. */
  readonly endReason?: SandboxEndReason
  /** On `image.pull.*`: the image, as the config names it. */
  readonly image?: string
  /** On `image.pull.progress` and `image.pull.end`: how far the pull has come. */
  readonly pull?: SandboxImagePullProgress
}

/**
 * How far an image pull has come. Layer sizes become known as each layer
 * starts downloading, so `totalBytes` can grow while a pull runs.
 */
export interface SandboxImagePullProgress {
  /** Layers of the image (those the engine already had count as done). */
  readonly layers: number
  /** Layers downloaded and unpacked, or already on the engine. */
  readonly layersDone: number
  /** Bytes downloaded so far. */
  readonly downloadedBytes: number
  /** Sum of the sizes of the layers whose size the registry has reported. */
  readonly totalBytes: number
}

/** A file operation through the host API, reported when it ends. */
export interface SandboxFileEvent {
  readonly type: 'file'
  readonly operation:
    | 'write'
    | 'read'
    | 'write-stream'
    | 'read-stream'
    | 'write-batch'
    | 'read-batch'
    | 'list'
    | 'stat'
    | 'remove'
    | 'rename'
    | 'make-directory'
    | 'watch'
  readonly sandboxId: SandboxId
  readonly backend: string
  readonly timestamp: number
  /** The path, or the directory of a batch or a listing. */
  readonly path: string
  /** File bytes moved (the whole stream or batch), when known. */
  readonly bytes?: number
  /** Files moved by a batch, or entries listed. */
  readonly files?: number
  readonly durationMs: number
  readonly error?: { readonly name: string; readonly code?: string; readonly message: string }
}

/**
 * How an exec ended: `exited` (with any exit code), `timed-out`, `aborted`,
 * `failed` (no result: the command could not be started, or its sandbox was
 * lost), or `detached` (the host stopped following a started process, which
 * runs on).
 */
export type SandboxExecOutcome = 'exited' | 'timed-out' | 'aborted' | 'failed' | 'detached'

/**
 * An exec or started process. Every `start` is followed by one `end`, also
 * when the command was refused or could not be started (outcome `failed`,
 * with the error the caller got).
 */
export interface SandboxExecEvent {
  readonly type: 'exec'
  readonly phase: 'start' | 'end'
  readonly sandboxId: SandboxId
  readonly backend: string
  readonly timestamp: number
  readonly command: string
  readonly exitCode?: number
  readonly timedOut?: boolean
  readonly aborted?: boolean
  readonly durationMs?: number
  /**
   * On `end`, where the fields above cannot tell it (`failed`, `detached`);
   * otherwise read it from them: `timed-out`, `aborted`, else `exited` when
   * there is an `exitCode`.
   */
  readonly outcome?: SandboxExecOutcome
  /** On an `end` whose outcome is `failed`: the error the caller got. */
  readonly error?: { readonly name: string; readonly code?: string; readonly message: string }
}

/** Reason codes for egress decisions; stable strings hosts may switch on. */
export type EgressReasonCode =
  | 'allowed'
  | 'policy-deny-all'
  | 'client-unknown'
  | 'host-not-allowed'
  | 'resolver-failed'
  | 'port-not-allowed'
  | 'address-private'
  | 'address-loopback'
  | 'address-link-local'
  | 'address-reserved'
  | 'address-proxy-self'
  | 'dns-failed'
  | 'dns-timeout'
  | 'bad-request'
  | 'host-mismatch'
  | 'ambiguous-length'
  | 'credential-placeholder-misdirected'
  | 'too-many-tunnels'
  | 'too-many-connections'
  | 'connect-failed'
  | 'connect-timeout'

export interface SandboxEgressEvent {
  readonly type: 'egress'
  readonly sandboxId?: SandboxId
  readonly timestamp: number
  readonly kind: 'http' | 'connect'
  readonly host: string
  readonly port: number
  readonly decision: 'allow' | 'deny'
  readonly reason: EgressReasonCode
  /** The address that was dialled, when one was. */
  readonly address?: string
  readonly bytesUp: number
  readonly bytesDown: number
  readonly durationMs: number
}

export type SandboxEventListener = (event: SandboxEvent) => void
