import {
  CredentialStore,
  defaultCredentialStore,
  type UnjudgedOwnerReason,
} from '@cordon/core/backend'
import { parseFlags } from './command-line.js'
import { loadDockerBackend } from './docker-backend-module.js'
import { parseDurationFlag } from './duration-flag.js'
import type { RunIo } from './run-command.js'

/** What each reason means to the person who ran gc, completing "kept N resources whose owner ...". */
const UNJUDGED_OWNER: Record<UnjudgedOwnerReason, string> = {
  unrecorded:
    'has no recorded identity (made by an older cordon, or by a host that could not read its own)',
  'unjudgeable-here':
    "cannot be judged by this process: its /proc is missing or shows another PID namespace's processes",
  'other-boot': 'ran on another machine, or on this one before its last boot',
  'other-pid-namespace':
    'ran in another PID namespace (a host in a container, or another container sharing this engine)',
  'other-time-namespace': 'ran in another time namespace',
}

export const GC_USAGE = `usage: cordon gc [--dry-run] [--snapshot-retention <duration>] [--credential-store <dir>] [--volume-retention <duration>]

Removes what cordon left on the Docker Engine for owners that are gone
(containers, volumes, networks) and agent runtimes nothing uses; never what
a live owner, or one cordon cannot judge from here, made. Snapshots
(sandbox.snapshot()) go when they are older than --snapshot-retention
(default 7d), whoever took them, and once
their host removed them and no sandbox runs from them. A detached
sandbox stays until its end time, whatever its owner, and goes past it.
Credentials of detached sandboxes that have ended are removed from the
credential store (default: $XDG_STATE_HOME/cordon/credentials, else
~/.local/state/cordon/credentials). --dry-run lists what would go and
removes nothing.

Named volumes (provider.volumes) are the user's data: gc lists each one and
keeps it, unless --volume-retention is given (0s takes every such volume);
then a volume no sandbox mounts and none has used for longer than that is
removed with everything in it.

A duration is a number and a unit, ms, s, m, h or d: 500ms, 12h, 1.5h, 30d.`

/** `cordon gc`: removes engine resources whose owning process is gone, and agent runtimes nothing uses. */
export async function gcCommand(argv: readonly string[], io: RunIo): Promise<number> {
  const values = parseFlags(
    'gc',
    argv,
    {
      'dry-run': { type: 'boolean', default: false },
      'snapshot-retention': { type: 'string' },
      'credential-store': { type: 'string' },
      'volume-retention': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    false,
  )
  const snapshotRetention = values['snapshot-retention']
  const snapshotRetentionMs =
    snapshotRetention === undefined
      ? undefined
      : parseDurationFlag('snapshot-retention', snapshotRetention, { zero: 'refused' })
  const retention = values['volume-retention']
  const volumeRetentionMs =
    retention === undefined ? undefined : parseDurationFlag('volume-retention', retention)
  const backend = await loadDockerBackend()
  const { docker, endpoint, description } = backend.connectEngine({})
  const report = await backend.collectGarbage({
    docker,
    engine: description,
    dryRun: values['dry-run'],
    ...(snapshotRetentionMs !== undefined ? { snapshotRetentionMs } : {}),
    ...(volumeRetentionMs === undefined ? {} : { volumeRetentionMs }),
  })
  const verb = values['dry-run'] ? 'would remove' : 'removed'
  const unjudged = report.unjudged.length
  io.stdout(
    `cordon gc (${endpoint}): ${verb} ${report.containers.length} containers, ${report.volumes.length} volumes, ${report.networks.length} networks, ${report.images.length} snapshot images, ${report.checkpoints?.length ?? 0} memory checkpoints; kept ${report.kept} (${report.kept - unjudged} with a live owner or in use, ${unjudged} whose owner cordon cannot judge from here)\n`,
  )
  const byReason = new Map<UnjudgedOwnerReason, string[]>()
  for (const { kind, id, reason } of report.unjudged) {
    const named = `${kind} ${kind === 'volume' ? id : id.slice(0, 12)}`
    byReason.set(reason, [...(byReason.get(reason) ?? []), named])
  }
  for (const [reason, named] of byReason)
    io.stdout(
      `cordon gc: kept ${named.length} whose owner ${UNJUDGED_OWNER[reason]}: ${named.join(', ')}\n`,
    )
  if (unjudged > 0)
    io.stdout(
      'cordon gc: an owner cordon cannot judge may still be running, so its resources stay until their lifetime (cordon.expires) passes; remove them by hand once you know the owner is gone\n',
    )
  // After the containers: a detached sandbox removed above leaves its credential with nothing to reach.
  const running = new Set(report.detachedKept)
  const store = new CredentialStore(
    (values['credential-store'] as string | undefined) ?? defaultCredentialStore(),
  )
  const credentials = store.prune(Date.now(), (id) => !running.has(id), values['dry-run'])
  io.stdout(
    `cordon gc: ${verb} ${credentials.length} credentials of ended detached sandboxes from ${store.directory}\n`,
  )
  const now = Date.now()
  for (const volume of report.namedVolumes) {
    const idle =
      volume.usedBy.length > 0 ? 'in use' : `last used ${describeAge(now - volume.lastUsedAt)} ago`
    const fate = volume.removed
      ? verb
      : volumeRetentionMs === undefined
        ? 'kept (no --volume-retention)'
        : 'kept'
    io.stdout(`cordon gc: volume ${volume.name} (${volume.sizeMb} MiB, ${idle}): ${fate}\n`)
  }
  for (const failure of report.failed)
    io.stderr(`cordon gc: could not remove ${failure.id}: ${failure.reason}\n`)
  return report.failed.length > 0 ? 1 : 0
}

/** An age as a person reads it: the largest whole unit. */
function describeAge(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000))
  if (seconds < 120) return `${seconds} s`
  if (seconds < 7_200) return `${Math.round(seconds / 60)} min`
  if (seconds < 172_800) return `${Math.round(seconds / 3_600)} h`
  return `${Math.round(seconds / 86_400)} d`
}
