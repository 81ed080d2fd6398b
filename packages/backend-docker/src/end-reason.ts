import { AGENT_EXIT_CODES } from '@cordon/agent/protocol'
import type { LostReason } from '@cordon/agent/sandbox'
import type { SandboxExecResult } from '@cordon/core'
import type { EngineEvents } from './engine-events.js'

/** How long after a container ends an OOM event may still arrive from the engine. */
const OOM_EVENT_GRACE_MS = 1000
/**
 * How long after the channel closes the container's `die` event (with the
 * agent's exit status) may still come: the agent seals the outputs after
 * closing the channel and before it exits.
 */
const DIE_EVENT_GRACE_MS = 15_000
/** A container that ends this close to its lifetime ended because of it (timers are not exact). */
const LIFETIME_SLACK_MS = 1_000

/**
 * Why a container ended underneath its host, from the engine's events: an
 * out-of-memory kill (under gVisor, the whole sandbox), the agent ending it
 * for a storage cap (its exit status), its own lifetime running out, or
 * anything else (`lost`: the engine went away, someone removed it).
 */
export async function endReason(
  events: EngineEvents,
  containerId: string,
  at: {
    readonly startedAt: number
    readonly closedAt: number
    readonly lifetimeMs: number | undefined
  },
): Promise<LostReason> {
  const [oom, exitCode] = await Promise.all([
    events.oomSince(containerId, at.startedAt, OOM_EVENT_GRACE_MS),
    events.exitCode(containerId, DIE_EVENT_GRACE_MS),
  ])
  if (oom) return 'out-of-memory'
  if (exitCode === AGENT_EXIT_CODES.storageLimit) return 'storage-limit'
  if (
    at.lifetimeMs !== undefined &&
    at.closedAt - at.startedAt >= at.lifetimeMs - LIFETIME_SLACK_MS
  )
    return 'lifetime'
  return 'lost'
}

/**
 * A command whose connection was lost because its container died of an
 * out-of-memory kill (under gVisor the whole sandbox is one process to the
 * host's OOM killer) ended with `oomKilled`, as the engine's event says.
 */
export async function explainLostCommand(
  events: EngineEvents,
  containerId: string,
  startedAt: number,
): Promise<SandboxExecResult | undefined> {
  if (!(await events.oomSince(containerId, startedAt, OOM_EVENT_GRACE_MS))) return undefined
  return {
    exitCode: 137,
    stdout: '',
    stderr: '',
    signal: 'SIGKILL',
    timedOut: false,
    aborted: false,
    oomKilled: true,
    durationMs: Date.now() - startedAt,
    stdoutTruncated: false,
    stderrTruncated: false,
  }
}
