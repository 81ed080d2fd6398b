import { basename } from 'node:path'
import { BUILTIN_BACKEND_PACKAGES } from '@cordon/builtin-backends'
import { SandboxBackendUnavailableError, SandboxError, type SandboxId } from '@cordon/core'
import {
  CredentialStore,
  defaultCredentialStore,
  forwardDirectoriesRoot,
  sweepForwardDirectories,
  type UnjudgedOwnerReason,
} from '@cordon/core/backend'
import { BACKEND_PACKAGES } from '../backend-packages.js'
import { parseFlags, UsageError } from './command-line.js'
import { type GarbageReport, loadDockerBackend } from './docker-backend-module.js'
import { parseDurationFlag } from './duration-flag.js'
import { ACI_GC, MICROVM_GC, prepareRemoteSweeps, type Sweep } from './remote-backend-sweeps.js'
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
                 [--label <key>=<value>]... [--aci <config.json>]... [--microvm <config.json>]...

Removes what cordon left on the Docker Engine for owners that are gone
(containers, volumes, networks) and agent runtimes nothing uses; never what
a live owner, or one cordon cannot judge from here, made. Snapshots
(sandbox.snapshot()) go when they are older than --snapshot-retention
(default 7d), whoever took them, and once
their host removed them and no sandbox runs from them. A detached
sandbox stays until its end time, whatever its owner, and goes past it.
Credentials of detached sandboxes that have ended are removed from the
credential store (default: $XDG_STATE_HOME/cordon/credentials, else
~/.local/state/cordon/credentials). The unix-socket port-forward
directories that hosts of this user killed outright left in
cordon-forwards-<uid> under the temporary directory ($TMPDIR, $TMP or
$TEMP, else /tmp) are removed once their host is gone. --dry-run lists
what would go and removes nothing.

Named volumes (provider.volumes) are the user's data: gc lists each one and
keeps it, unless --volume-retention is given (0s takes every such volume);
then a volume no sandbox mounts and none has used for longer than that is
removed with everything in it.

--label scopes the Docker sweep to what carries that label (the labels of
a provider's backend config are on everything it makes); given more than
once, to what carries all of them. For hosts sharing an engine: each
collects its own and nothing else. Agent runtimes, which no provider
labels, are then left alone, and so are port-forward directories and the
checkpoints of snapshots out of the scope; a detached sandbox's credential
goes only at its end time.
--label cannot be combined with --aci or --microvm, whose sweeps it would
not scope.

--aci and --microvm reach the other backends: each names a JSON file with
the backend config's fields but its token function (tier and runtime or
service may be left out), and gc removes there, and nothing else: the
detached sandboxes whose end time has passed (ACI: the container groups of
the config's resource group, stopped ones too; microVM: the control plane's
guests, paused ones too), on the microVM control plane the guests, not
detached, whose creating host process ran on this machine and has ended
(paused ones too), and there cordon's snapshots older than
--snapshot-retention (default the config's snapshotRetentionMs, else 7d). The token comes from the environment:
CORDON_ARM_TOKEN (Azure Resource Manager) for --aci,
CORDON_ORCHESTRATOR_TOKEN (the control plane) for --microvm. Each flag may
be given more than once. With either, the Docker Engine is swept too when
one is reachable, and skipped (saying why) when it is not; without them, an
engine that cannot be reached is an error.

A duration is a number and a unit, ms, s, m, h or d: 500ms, 12h, 1.5h, 30d.`

/** The backends whose sandboxes the Docker sweep sees: only it knows which of their detached ones still run. */
const DOCKER_BACKENDS: ReadonlySet<string> = new Set(
  Object.entries(BACKEND_PACKAGES)
    .filter(([, packageName]) => packageName === BUILTIN_BACKEND_PACKAGES.docker)
    .map(([name]) => name),
)

/**
 * `cordon gc`: removes engine resources whose owning process is gone, agent
 * runtimes nothing uses, and (with --aci, --microvm) the other backends'
 * detached sandboxes past their end time.
 */
export async function gcCommand(
  argv: readonly string[],
  io: RunIo,
  signal: AbortSignal,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const values = parseFlags(
    'gc',
    argv,
    {
      'dry-run': { type: 'boolean', default: false },
      'snapshot-retention': { type: 'string' },
      'credential-store': { type: 'string' },
      'volume-retention': { type: 'string' },
      label: { type: 'string', multiple: true },
      aci: { type: 'string', multiple: true },
      microvm: { type: 'string', multiple: true },
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
  const labels = parseLabelFlags(values.label ?? [])
  if (labels && (values.aci?.length || values.microvm?.length))
    throw new UsageError(
      '--label scopes only the Docker sweep: it cannot be combined with --aci or --microvm',
    )
  // Every file, token and package is checked before anything is removed anywhere.
  const remote = [
    ...(await prepareRemoteSweeps(ACI_GC, values.aci ?? [], { snapshotRetentionMs }, env)),
    ...(await prepareRemoteSweeps(MICROVM_GC, values.microvm ?? [], { snapshotRetentionMs }, env)),
  ]
  const dryRun = values['dry-run']
  const verb = dryRun ? 'would remove' : 'removed'

  let report: GarbageReport | undefined
  try {
    const backend = await loadDockerBackend()
    const { docker, endpoint, description } = backend.connectEngine({})
    report = await backend.collectGarbage({
      docker,
      engine: description,
      dryRun,
      signal,
      ...(snapshotRetentionMs !== undefined ? { snapshotRetentionMs } : {}),
      ...(volumeRetentionMs === undefined ? {} : { volumeRetentionMs }),
      ...(labels ? { labels } : {}),
    })
    const scope = labels
      ? ` [labels ${Object.entries(labels)
          .map(([key, value]) => `${key}=${value}`)
          .join(', ')}]`
      : ''
    printDockerReport(report, `${endpoint}${scope}`, { verb, volumeRetentionMs }, io)
  } catch (error) {
    // Asked to sweep other backends, gc goes on without an engine it cannot reach.
    if (remote.length === 0 || !SandboxBackendUnavailableError.isInstance(error)) throw error
    io.stdout(`cordon gc: skipped the Docker Engine: ${error.message}\n`)
  }

  // No provider labels the port-forward directories: a --label run leaves them to an unscoped one, as it does agent runtimes.
  const forwardsRoot = forwardDirectoriesRoot()
  if (labels)
    io.stdout(
      `cordon gc: left the port-forward directories in ${forwardsRoot} alone (they carry no provider's labels; a run without --label sweeps them)\n`,
    )
  const sweeps: Sweep[] = [...remote, ...(labels ? [] : [forwardDirectoriesSweep(forwardsRoot)])]
  let sweepFailed = false
  for (const sweep of sweeps) {
    // A signal to cordon stops gc before the next sweep (a remote one under way
    // keeps its own deadline: it is not handed the signal, which would replace it).
    signal.throwIfAborted()
    try {
      const removed = await sweep.run(dryRun)
      io.stdout(
        `cordon gc (${sweep.where}): ${verb} ${removed.length} ${sweep.removes}${removed.length > 0 ? `: ${removed.join(', ')}` : ''}\n`,
      )
    } catch (error) {
      sweepFailed = true
      const code = SandboxError.isInstance(error) ? ` [${error.code}]` : ''
      io.stderr(
        `cordon gc (${sweep.where}): could not sweep: ${error instanceof Error ? error.message : String(error)}${code}\n`,
      )
    }
  }

  // After every sweep: a detached sandbox removed above leaves its credential with nothing to reach.
  signal.throwIfAborted()
  const running = new Set(report?.detachedKept ?? [])
  const store = new CredentialStore(
    (values['credential-store'] as string | undefined) ?? defaultCredentialStore(),
  )
  // Only the Docker sweep, when it ran unscoped, knows which detached sandboxes still run, and only
  // its own backends'; a credential of another backend's sandbox, or out of a --label scope, goes at
  // its end time.
  const isGone = (id: SandboxId): boolean =>
    report !== undefined &&
    labels === undefined &&
    DOCKER_BACKENDS.has(store.load(id)?.backend ?? '') &&
    !running.has(id)
  const credentials = store.prune(Date.now(), isGone, dryRun)
  io.stdout(
    `cordon gc: ${verb} ${credentials.length} credentials of ended detached sandboxes from ${store.directory}\n`,
  )
  for (const failure of report?.failed ?? [])
    io.stderr(`cordon gc: could not remove ${failure.id}: ${failure.reason}\n`)
  return (report?.failed.length ?? 0) > 0 || sweepFailed ? 1 : 0
}

/**
 * The port-forward directories this user's killed hosts left on this
 * machine (`sweepForwardDirectories`: only those whose owner is judged gone).
 */
function forwardDirectoriesSweep(root: string): Sweep {
  return {
    where: root,
    removes: 'port-forward directories of hosts that are gone',
    run: async (dryRun) =>
      (await sweepForwardDirectories({ dryRun })).map((directory) => basename(directory)),
  }
}

/** `--label key=value` flags as labels, or undefined when none is given. */
function parseLabelFlags(flags: readonly string[]): Record<string, string> | undefined {
  if (flags.length === 0) return undefined
  const labels: Record<string, string> = {}
  for (const flag of flags) {
    const split = flag.indexOf('=')
    if (split <= 0) throw new UsageError(`--label takes <key>=<value>, not ${JSON.stringify(flag)}`)
    labels[flag.slice(0, split)] = flag.slice(split + 1)
  }
  return labels
}

/** What the Docker sweep did and kept, as the person who ran gc reads it. */
function printDockerReport(
  report: GarbageReport,
  endpoint: string,
  { verb, volumeRetentionMs }: { readonly verb: string; readonly volumeRetentionMs?: number },
  io: RunIo,
): void {
  const unjudged = report.unjudged.length
  // Snapshots outlive their owners: one kept by its retention says nothing of its owner.
  const retained = report.snapshotsWithinRetention ?? 0
  io.stdout(
    `cordon gc (${endpoint}): ${verb} ${report.containers.length} containers, ${report.volumes.length} volumes, ${report.networks.length} networks, ${report.images.length} snapshot images, ${report.checkpoints?.length ?? 0} memory checkpoints (${report.checkpointCopies?.length ?? 0} copies containerd left of them); kept ${report.kept} (${report.kept - unjudged - retained} with a live owner or in use, ${retained} snapshots within their retention, ${unjudged} whose owner cordon cannot judge from here)\n`,
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
}

/** An age as a person reads it: the largest whole unit. */
function describeAge(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000))
  if (seconds < 120) return `${seconds} s`
  if (seconds < 7_200) return `${Math.round(seconds / 60)} min`
  if (seconds < 172_800) return `${Math.round(seconds / 3_600)} h`
  return `${Math.round(seconds / 86_400)} d`
}
