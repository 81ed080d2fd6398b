import { newAgentSecret } from '@cordon/agent/protocol'
import {
  AgentClient,
  AgentSandbox,
  dialTcp,
  refusedTheSecret,
  waitForAgent,
} from '@cordon/agent/sandbox'
import type { ACIStandbyPoolBackendConfig } from '@cordon/builtin-backends'
import {
  type SandboxBackendOptions,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  type SandboxId,
  SandboxNotFoundError,
  SandboxReadinessError,
} from '@cordon/core'
import {
  backgroundSweep,
  type ConnectedBackendSandbox,
  type CordonSandboxBackend,
  enforcedLayoutMounts,
  LABEL,
  parseBackendConfig,
  removeEach,
  resolveBackendOptions,
  resolveSandboxPath,
  runCreateSequence,
  type SandboxBackendConnectRequest,
  type SandboxBackendContext,
  type SandboxBackendFactory,
  type SandboxListing,
  writableRoots,
} from '@cordon/core/backend'
import {
  BACKEND_NAME,
  DEFAULT_AGENT_PORT,
  DEFAULT_ARM_API_VERSION,
  DEFAULT_ARM_ENDPOINT,
  DEFAULT_NAME_PREFIX,
  DEFAULT_READINESS_TIMEOUT_MS,
  LIFETIME_CONFIG_MAP_KEY,
} from './aci-defaults.js'
import { ArmClient } from './arm-client.js'
import { refuseLayoutProfileMismatch, refuseUnmountableLayout } from './claim-refusals.js'
import { aciStandbyPoolBackend } from './definition.js'
import {
  claimTags,
  decodeReconnectState,
  encodeReconnectState,
  groupFacts,
  hasEnded,
  isExpiredDetached,
  listingOf,
} from './detached-groups.js'
import { groupNameFor, namePrefixProblems } from './group-name.js'
import { placementRefusal } from './group-placement.js'
import type { ProfileFacts } from './profile-facts.js'
import { SharedRead } from './shared-read.js'
import { addressOf, StandbyPoolClaims } from './standby-pool-claims.js'
import { readSubnetEgress, type SubnetEgressVerdict } from './subnet-egress-read.js'

/** How long a read of the profile, or of the subnet's security group, is trusted. */
const REMOTE_FACTS_TTL_MS = 60_000
/** How long asking ARM whether a group is gone may take. */
const EXPLAIN_LOSS_TIMEOUT_MS = 10_000
/** How long the background sweep of ended detached groups may take. */
const SWEEP_TIMEOUT_MS = 120_000

/**
 * The `container:aci-standby-pool` backend: each sandbox is a container group
 * claimed from an Azure Container Instances standby pool, and commands and
 * files go to the cordon agent inside it over TCP.
 *
 * `create()` resolves only when the agent in the claimed group has answered
 * a health request over a connection authenticated with a secret minted for
 * this claim. Everything it does (reading the profile and the subnet's
 * security group, the claim, ARM's long-running operation, waiting for an
 * address, the agent's health) shares one readiness budget. If anything
 * fails, runs out of time or is aborted on the way, the group is deleted by
 * name (waiting first for a claim still on the wire) before `create()`
 * rejects.
 *
 * Construction does no I/O; it refuses a layout a claim cannot mount.
 */
export const createBackend: SandboxBackendFactory<ACIStandbyPoolBackendConfig> = (input, context) =>
  createAciStandbyPoolBackend(input, context)

export function createAciStandbyPoolBackend(
  input: ACIStandbyPoolBackendConfig,
  context: SandboxBackendContext,
): CordonSandboxBackend<'container'> {
  const config = parseBackendConfig(aciStandbyPoolBackend, input)
  const prefix = config.containerNamePrefix ?? DEFAULT_NAME_PREFIX
  const problems = namePrefixProblems(prefix)
  if (!context.layout)
    problems.push({
      path: 'layout',
      message: 'the container tier needs a layout; its outputs path is rootDir',
    })
  if (problems.length > 0)
    throw new SandboxConfigValidationError(`${BACKEND_NAME} backend config`, problems)
  const layout = context.layout!
  refuseUnmountableLayout(layout)
  if (context.brokeredCredentials.length > 0 || context.allowInwardFor.length > 0) {
    throw new SandboxControlRefusedError(
      context.brokeredCredentials.length > 0 ? 'brokeredCredentials' : 'allowInwardFor',
      BACKEND_NAME,
      'these need the egress gateway, which a claimed container group cannot have',
    )
  }

  const readyTimeoutMs = config.readyTimeoutMs ?? DEFAULT_READINESS_TIMEOUT_MS
  const agentPort = config.workerPort ?? DEFAULT_AGENT_PORT
  const client = new ArmClient({
    endpoint: config.armEndpoint ?? DEFAULT_ARM_ENDPOINT,
    getToken: config.getArmToken,
  })
  const claims = standbyPoolClaimsFor(config, client, context.providerId)

  // One read of the profile, and one of the subnet's security group, serve
  // every create for a while (the first create after the provider starts
  // makes them: construction does no I/O).
  const profile = new SharedRead<ProfileFacts>(() => claims.readProfile(), REMOTE_FACTS_TTL_MS)
  const subnetId = config.subnetId
  const subnetEgress =
    subnetId === undefined
      ? undefined
      : new SharedRead<SubnetEgressVerdict>(
          () => readSubnetEgress(client, subnetId),
          REMOTE_FACTS_TTL_MS,
        )

  /**
   * `deny-all` is the subnet's to enforce, so it holds only if the subnet's
   * security group denies outbound internet traffic; refused otherwise.
   * (egressRefusal has already refused every other policy, and deny-all
   * without a subnet.)
   */
  const refuseUnenforcedDenyAll = async (signal: AbortSignal): Promise<void> => {
    if (!subnetEgress) {
      throw new SandboxControlRefusedError(
        'egress.deny-all',
        BACKEND_NAME,
        'without a subnetId nothing denies outbound traffic',
      )
    }
    const { problem } = await subnetEgress.get(signal, 'create')
    if (problem !== undefined)
      throw new SandboxControlRefusedError('egress.deny-all', BACKEND_NAME, problem)
  }

  const create = async (options: SandboxBackendOptions): Promise<AgentSandbox> => {
    // Refused before any request to Azure (a limit, a proxied egress policy,
    // deny-all without a subnet): nothing about the pool can change these.
    const request = resolveBackendOptions(options, aciStandbyPoolBackend, config)
    const groupName = groupNameFor(prefix, request.id)
    let setback: Error | undefined
    let putOnWire: Promise<unknown> | undefined
    return runCreateSequence(
      {
        sandboxId: request.id,
        backend: BACKEND_NAME,
        timeoutMs: readyTimeoutMs,
        signal: request.signal,
        onStep: request.onStep,
        emit: context.emit,
        firstStep: 'egress.subnet',
        timeoutCause: () => setback,
        cleanup: async () => {
          if (!putOnWire) return
          // A PUT still on the wire may yet create the group: let it land, then delete.
          await putOnWire.catch(() => {})
          await claims.release(groupName)
        },
        cleanupWhat: `deleting container group ${groupName}`,
      },
      async ({ signal, step }) => {
        // Both reads start at once; the egress verdict is judged first, and a
        // failed profile read is reported only after it.
        const pendingFacts = profile.get(signal, 'create')
        pendingFacts.catch(() => {})
        await refuseUnenforcedDenyAll(signal)
        step('profile')
        const facts = await pendingFacts
        refuseLayoutProfileMismatch(layout, facts)
        step('claim')
        const secret = newAgentSecret()
        // One time for its tags (a detached group's end time) and for the creator's handle (sandbox.endsAt).
        const claimedAt = Date.now()
        const group = await claims.claim({
          groupName,
          sandboxId: request.id,
          secret,
          tags: claimTags(request, claimedAt),
          lifetimeMs: request.detached ? request.lifetimeMs : undefined,
          profile: facts,
          signal,
          onPut: (attempt) => {
            putOnWire = attempt
          },
          onSetback: (reason) => {
            setback = reason
          },
          onPhase: step,
        })
        step('agent.health')
        const agent = new AgentClient({
          secret,
          dial: dialTcp(group.address, agentPort),
          description: `tcp:${group.address}:${agentPort}`,
        })
        const health = await waitForAgent(agent, request.id, signal, config.readyPollIntervalMs)
        const missing = writableRoots(layout).filter((root) => !health.writeRoots.includes(root))
        if (missing.length > 0) {
          throw new SandboxReadinessError(
            `the agent in sandbox ${request.id} may not write ${missing.join(', ')}; the profile's CORDON_AGENT_WRITE_ROOTS must list the layout's writable paths`,
            request.id,
          )
        }
        if (request.detached && health.lifetimeMs !== request.lifetimeMs) {
          // Nothing would end the group's processes if no host came back.
          throw new SandboxControlRefusedError(
            'detached',
            BACKEND_NAME,
            `the agent in the claimed group did not take the lifetime the claim set (config-map key ${LIFETIME_CONFIG_MAP_KEY}): the profile's image runs an entrypoint without it; copy this version's cordon-aci-entrypoint.sh (aciEntrypointPath()) into the image`,
          )
        }
        const sandbox = sandboxOf({
          id: request.id,
          groupName,
          agent,
          facts,
          env: request.env,
          workingDirectory: request.workingDirectory,
          execTimeoutMs: request.execTimeoutMs,
          ...(request.detached
            ? {
                ...(request.lifetimeMs !== undefined
                  ? { endsAt: claimedAt + request.lifetimeMs }
                  : {}),
                reconnectSecret: encodeReconnectState({
                  secret,
                  env: request.env,
                  workingDirectory: resolveSandboxPath(
                    layout.outputs.containerPath,
                    request.workingDirectory ?? layout.outputs.containerPath,
                  ),
                }),
              }
            : {}),
        })
        step('agent.working-directory')
        await sandbox.prepareWorkingDirectory(signal)
        step('ready')
        return sandbox
      },
    )
  }

  /**
   * The sandbox over an authenticated client of a claimed group's agent, for
   * `create()` and for `connect()`. With a `reconnectSecret` (a detached
   * sandbox) it can be let go of: `disconnect()` closes this host's
   * connections and leaves the group running until its lifetime.
   */
  const sandboxOf = (parts: {
    readonly id: SandboxId
    readonly groupName: string
    readonly agent: AgentClient
    readonly facts: ProfileFacts
    readonly env: Readonly<Record<string, string>>
    readonly workingDirectory: string | undefined
    readonly execTimeoutMs: number
    readonly reconnectSecret?: string
    /** A detached group's end time as its tag holds it. */
    readonly endsAt?: number
  }): AgentSandbox =>
    new AgentSandbox({
      id: parts.id,
      rootDir: layout.outputs.containerPath,
      writeRoots: writableRoots(layout),
      env: parts.env,
      workingDirectory: parts.workingDirectory,
      execTimeoutMs: parts.execTimeoutMs,
      client: parts.agent,
      backend: BACKEND_NAME,
      environment: aciStandbyPoolBackend.enforcement.environment,
      // The profile's limits hold for every group; a claim cannot change them.
      enforcement: {
        backend: BACKEND_NAME,
        isolation: aciStandbyPoolBackend.enforcement.isolation,
        // The only policy a claim can have (egressRefusal refuses every other).
        egress: { kind: 'deny-all' },
        limits: {
          memoryLimitMb: parts.facts.memoryLimitMb,
          ...(parts.facts.maxProcesses !== undefined
            ? { maxProcesses: parts.facts.maxProcesses }
            : {}),
        },
        mounts: enforcedLayoutMounts(layout),
      },
      emit: context.emit,
      release: (releaseSignal) => claims.release(parts.groupName, releaseSignal),
      explainLoss: () =>
        claims.whyGone(parts.groupName, AbortSignal.timeout(EXPLAIN_LOSS_TIMEOUT_MS)),
      ...(parts.reconnectSecret === undefined
        ? {}
        : {
            reconnectSecret: parts.reconnectSecret,
            ...(parts.endsAt !== undefined ? { endsAt: parts.endsAt } : {}),
            // The group and its agent go on; AgentSandbox has closed this host's connections.
            disconnect: async () => {},
          }),
    })

  /**
   * In the background of the backend's first successful create, or of its
   * first connect or list (and of the next one after a sweep that failed):
   * deletes the detached groups of the resource group whose end time has
   * passed. Their agents ended themselves
   * then (the group stopped); what is left is the group's record, which
   * nothing else would remove if their hosts never come back. A group that
   * is not detached is never touched: it belongs to the host that claimed it.
   */
  const detachedSweep = backgroundSweep(
    (signal) => removeEndedDetachedGroups(claims, signal),
    SWEEP_TIMEOUT_MS,
  )
  const sweepEndedDetached = (): void => detachedSweep.run()

  const connect = async (
    request: SandboxBackendConnectRequest,
  ): Promise<ConnectedBackendSandbox> => {
    const id = request.sandboxId
    const state = decodeReconnectState(request.secret, id)
    sweepEndedDetached()
    const groupName = groupNameFor(prefix, id)
    const signal = request.signal ?? AbortSignal.timeout(readyTimeoutMs)
    const document = await claims.readGroup(groupName, signal)
    const group = document === undefined ? undefined : groupFacts(document)
    if (!group?.managed || group.sandboxId !== id)
      throw new SandboxNotFoundError(
        id,
        `resource group ${config.resourceGroup} has no container group ${groupName} of cordon's (a provider finds groups named with its containerNamePrefix)`,
      )
    if (!group.detached)
      throw new SandboxNotFoundError(id, 'it was not created detached: it ends with its creator')
    const address = addressOf(document)
    if (hasEnded(group, Date.now()) || address === undefined)
      throw new SandboxNotFoundError(
        id,
        'it has ended (its lifetime ran out, or it was destroyed or stopped)',
      )
    const refusal =
      config.subnetId === undefined
        ? undefined
        : placementRefusal(groupName, document, config.subnetId)
    if (refusal) throw refusal
    const facts = await profile.get(signal, 'connect')
    const agent = new AgentClient({
      secret: state.secret,
      dial: dialTcp(address, agentPort),
      description: `tcp:${address}:${agentPort}`,
    })
    try {
      // The first authenticated connection proves the credential; it serves the first operation.
      await agent.openSpareConnection(signal)
    } catch (error) {
      agent.close()
      if (refusedTheSecret(error))
        throw new SandboxCredentialRefusedError(id, "the sandbox's agent refused the credential", {
          cause: error,
        })
      throw error
    }
    const sandbox = sandboxOf({
      id,
      groupName,
      agent,
      facts,
      env: state.env,
      workingDirectory: state.workingDirectory,
      execTimeoutMs: request.execTimeoutMs,
      reconnectSecret: request.secret,
    })
    return { sandbox, endsAt: group.endsAt ?? Date.now() }
  }

  const list = async (options: {
    readonly signal?: AbortSignal
  }): Promise<readonly SandboxListing[]> => {
    sweepEndedDetached()
    const now = Date.now()
    const groups = await claims.listGroups(options.signal)
    return groups.flatMap((document) => listingOf(groupFacts(document), context.providerId, now))
  }

  return {
    tier: 'container',
    name: BACKEND_NAME,
    create: async (options) => {
      const sandbox = await create(options)
      // After the create: a refused or failed one asks Azure for nothing more than it needed.
      sweepEndedDetached()
      return sandbox
    },
    connect,
    list,
    async close() {
      await detachedSweep.stop()
      await client.close()
    },
  }
}

function standbyPoolClaimsFor(
  config: ACIStandbyPoolBackendConfig,
  client: ArmClient,
  providerId: string,
): StandbyPoolClaims {
  return new StandbyPoolClaims({
    client,
    subscriptionId: config.subscriptionId,
    resourceGroup: config.resourceGroup,
    location: config.location,
    standbyPoolResourceId: config.standbyPoolResourceId,
    containerGroupProfileResourceId: config.containerGroupProfileResourceId,
    containerGroupProfileRevision: config.containerGroupProfileRevision,
    subnetId: config.subnetId,
    apiVersion: config.armApiVersion ?? DEFAULT_ARM_API_VERSION,
    agentPort: config.workerPort ?? DEFAULT_AGENT_PORT,
    tags: { [LABEL.managed]: '1', [LABEL.provider]: providerId },
  })
}

/**
 * `cordon gc` for ACI, for a host's own schedule (a timer job, a cron) and for
 * `cordon gc --aci`: deletes the detached sandboxes' container groups of the
 * configured resource group whose end time has passed, and resolves with
 * their names (with `dryRun`, the names it would delete, deleting nothing).
 * Their agents ended themselves at that time; each backend also does this
 * once, in the background, when it first creates, connects or lists.
 * Nothing else is touched.
 */
export async function removeEndedDetachedAciGroups(
  input: ACIStandbyPoolBackendConfig,
  options: { readonly signal?: AbortSignal; readonly dryRun?: boolean } = {},
): Promise<string[]> {
  const config = parseBackendConfig(aciStandbyPoolBackend, input)
  const client = new ArmClient({
    endpoint: config.armEndpoint ?? DEFAULT_ARM_ENDPOINT,
    getToken: config.getArmToken,
  })
  try {
    return await removeEndedDetachedGroups(
      standbyPoolClaimsFor(config, client, 'gc'),
      options.signal ?? AbortSignal.timeout(SWEEP_TIMEOUT_MS),
      options.dryRun === true,
    )
  } finally {
    await client.close()
  }
}

/**
 * Deletes every detached cordon group of the claims' resource group whose
 * end time has passed, and resolves with their names: the sweep each
 * backend runs once, and what a host's own schedule can call
 * ({@link removeEndedDetachedAciGroups}). With `dryRun` it only names them.
 */
async function removeEndedDetachedGroups(
  claims: StandbyPoolClaims,
  signal: AbortSignal,
  dryRun = false,
): Promise<string[]> {
  const now = Date.now()
  const ended = (await claims.listGroups(signal))
    .map(groupFacts)
    .filter((facts) => isExpiredDetached(facts, now))
  if (dryRun) return ended.map((facts) => facts.name)
  // One group Azure fails to delete does not keep the others.
  return removeEach(
    ended,
    (facts) => facts.name,
    (facts) => claims.release(facts.name, signal),
  )
}
