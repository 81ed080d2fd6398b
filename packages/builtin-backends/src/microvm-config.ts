import type { TlsClientMaterial } from '@cordon/core'
import { durationMsSchema, functionSchema, tlsClientSchema } from '@cordon/core/backend'
import { z } from 'zod'

/** A per-agent snapshot the orchestrator resumes instead of a fresh template. */
export interface AgentSnapshotRef {
  readonly orgId: string
  readonly agentId: string
  readonly version: string
}

/** `microvm` tier against a guest orchestrator's control plane (the reference's fields). */
export interface MicroVMBackendConfig {
  readonly tier: 'microvm'
  readonly service: 'self-hosted'
  readonly orchestratorEndpoint: string
  /** Returns the control plane's bearer token; called before every request. */
  readonly getToken: () => Promise<string>
  /** Template (golden snapshot) to resume. */
  readonly template?: string
  readonly agentSnapshot?: AgentSnapshotRef
  /** Guest vsock port of the agent when the control plane names none (default 1024). */
  readonly agentVsockPort?: number
  /** Budget for a guest to become exec-ready after the claim (default 60 s). */
  readonly readyTimeoutMs?: number
  /** Delay between the agent health probes while a guest comes up (default 250 ms). */
  readonly readyPollIntervalMs?: number
  /** Client certificate for a `tls` (mTLS relay) agent endpoint. */
  readonly mtls?: TlsClientMaterial
  /** Client certificate for the control plane itself. */
  readonly controlPlaneMtls?: TlsClientMaterial
  /**
   * How long a guest that is not detached runs on once its host process is
   * gone (no `hold-host` connection to its agent), in ms, before its agent
   * ends it and the orchestrator removes it (default 30 s,
   * `DEFAULT_HOST_GONE_GRACE_MS` of `@cordon/backend-microvm`).
   */
  readonly hostGoneGraceMs?: number
  /**
   * How long the orchestrator keeps a snapshot cordon took
   * (`sandbox.snapshot()`), in ms: each provider's first create removes
   * cordon's snapshots on the control plane older than this, whoever took
   * them (default 7 days, `DEFAULT_SNAPSHOT_RETENTION_MS` of
   * `@cordon/backend-microvm`).
   */
  readonly snapshotRetentionMs?: number
}

export const agentSnapshotRefSchema: z.ZodType<AgentSnapshotRef> = z
  .object({ orgId: z.string().min(1), agentId: z.string().min(1), version: z.string().min(1) })
  .strict()
  .readonly()

export const microVMBackendConfigSchema: z.ZodType<MicroVMBackendConfig> = z
  .object({
    tier: z.literal('microvm'),
    service: z.literal('self-hosted'),
    orchestratorEndpoint: z.string().url(),
    getToken: functionSchema<() => Promise<string>>(
      'getToken must be a function returning a token',
    ),
    template: z.string().min(1).optional(),
    agentSnapshot: agentSnapshotRefSchema.optional(),
    agentVsockPort: z.number().int().min(1).max(0xffffffff).optional(),
    readyTimeoutMs: durationMsSchema().optional(),
    readyPollIntervalMs: durationMsSchema().optional(),
    mtls: tlsClientSchema.optional(),
    controlPlaneMtls: tlsClientSchema.optional(),
    snapshotRetentionMs: z.number().int().positive().optional(),
    // The agent's bound (MAX_HOST_GRACE_MS of @cordon/agent's protocol): an hour.
    hostGoneGraceMs: z.number().int().positive().max(3_600_000).optional(),
  })
  .strict()
  .readonly()
