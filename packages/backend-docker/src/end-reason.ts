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
/** A container's exit status when its first process died of SIGKILL. */
const SIGKILL_EXIT_CODE = 128 + 9

/**
 * Whether a container that ended with `exitCode` died of a SIGKILL the
 * engine was not asked to send: an out-of-memory kill whose `oom` event the
 * engine did not send.
 *
 * Why this is needed: under load the engine sometimes reports a container's
 * death (exit 137) and never its OOM kill. Seen on this project's machines
 * for gVisor sandboxes killed for memory while the test suite ran (the
 * kernel's log had the kill, `docker events` only the `die`); the engine's
 * shim learns of an OOM through the container's cgroup, and drops the
 * notice when the cgroup is gone before it gets to it. Nothing in a
 * sandbox can SIGKILL its first process (the agent's user is not the
 * sandbox's), and every kill through the engine (a destroy, `docker kill`,
 * `docker rm -f`, the engine stopping) comes with a `kill` event first; what
 * is left is the host's OOM killer, or a person's `kill -9` of the
 * container's first process on the host, which is reported as out-of-memory too.
 */
function killedUnasked(death: ContainerDeath): boolean {
  return death.exitCode === SIGKILL_EXIT_CODE && !death.killRequested
}

/** A container's exit status, and whether the engine had been asked to kill it, as of its `die`. */
interface ContainerDeath {
  readonly exitCode: number | undefined
  readonly killRequested: boolean
}

/**
 * The container's exit status (waiting up to `graceMs` for its `die`), with
 * whether a `kill` came before it, read as the wait ends: the `kill` event
 * comes before the `die`, and a destroy's release forgets both soon after
 * (`EngineEvents.forget`), so asking later could miss the kill and take a
 * destroy for an out-of-memory kill.
 */
async function containerDeath(
  events: EngineEvents,
  containerId: string,
  graceMs: number,
): Promise<ContainerDeath> {
  const exitCode = await events.exitCode(containerId, graceMs)
  return { exitCode, killRequested: events.killRequested(containerId) }
}

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
  const [oom, death] = await Promise.all([
    events.oomSince(containerId, at.startedAt, OOM_EVENT_GRACE_MS),
    containerDeath(events, containerId, DIE_EVENT_GRACE_MS),
  ])
  if (oom || killedUnasked(death)) return 'out-of-memory'
  if (death.exitCode === AGENT_EXIT_CODES.storageLimit) return 'storage-limit'
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
 * host's OOM killer) ended with `oomKilled`: the engine's `oom` event, or
 * a container that died of a SIGKILL the engine was not asked to send
 * (`killedUnasked`). A container still running after the OOM grace did not
 * die of one.
 */
export async function explainLostCommand(
  events: EngineEvents,
  containerId: string,
  startedAt: number,
): Promise<SandboxExecResult | undefined> {
  const [oom, death] = await Promise.all([
    events.oomSince(containerId, startedAt, OOM_EVENT_GRACE_MS),
    containerDeath(events, containerId, OOM_EVENT_GRACE_MS),
  ])
  if (!oom && !killedUnasked(death)) return undefined
  return {
    exitCode: SIGKILL_EXIT_CODE,
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
