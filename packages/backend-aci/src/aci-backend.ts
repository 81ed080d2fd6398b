import { newAgentSecret } from '@cordon/agent/protocol'
import { AgentClient, AgentSandbox, dialTcp, waitForAgent } from '@cordon/agent/sandbox'
import type { ACIStandbyPoolBackendConfig } from '@cordon/builtin-backends'
import {
  type SandboxBackendOptions,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxReadinessError,
} from '@cordon/core'
import {
  type CordonSandboxBackend,
  enforcedLayoutMounts,
  parseBackendConfig,
  resolveBackendOptions,
  runCreateSequence,
  type SandboxBackendContext,
  type SandboxBackendFactory,
  writableRoots,
} from '@cordon/core/backend'
import {
  BACKEND_NAME,
  DEFAULT_AGENT_PORT,
  DEFAULT_ARM_API_VERSION,
  DEFAULT_ARM_ENDPOINT,
  DEFAULT_NAME_PREFIX,
  DEFAULT_READINESS_TIMEOUT_MS,
} from './aci-defaults.js'
import { ArmClient } from './arm-client.js'
import { refuseLayoutProfileMismatch, refuseUnmountableLayout } from './claim-refusals.js'
import { aciStandbyPoolBackend } from './definition.js'
import { groupNameFor, namePrefixProblems } from './group-name.js'
import type { ProfileFacts } from './profile-facts.js'
import { SharedRead } from './shared-read.js'
import { StandbyPoolClaims } from './standby-pool-claims.js'
import { readSubnetEgress, type SubnetEgressVerdict } from './subnet-egress-read.js'

/** How long a read of the profile, or of the subnet's security group, is trusted. */
const REMOTE_FACTS_TTL_MS = 60_000
/** How long asking ARM whether a group is gone may take. */
const EXPLAIN_LOSS_TIMEOUT_MS = 10_000

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
): CordonSandboxBackend {
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
  const claims = new StandbyPoolClaims({
    client,
    subscriptionId: config.subscriptionId,
    resourceGroup: config.resourceGroup,
    location: config.location,
    standbyPoolResourceId: config.standbyPoolResourceId,
    containerGroupProfileResourceId: config.containerGroupProfileResourceId,
    containerGroupProfileRevision: config.containerGroupProfileRevision,
    subnetId: config.subnetId,
    apiVersion: config.armApiVersion ?? DEFAULT_ARM_API_VERSION,
    agentPort,
    tags: { 'cordon.managed': '1', 'cordon.provider': context.providerId },
  })

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
        const group = await claims.claim({
          groupName,
          sandboxId: request.id,
          secret,
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
        const sandbox = new AgentSandbox({
          id: request.id,
          rootDir: layout.outputs.containerPath,
          writeRoots: writableRoots(layout),
          env: request.env,
          workingDirectory: request.workingDirectory,
          execTimeoutMs: request.execTimeoutMs,
          client: agent,
          backend: BACKEND_NAME,
          environment: aciStandbyPoolBackend.enforcement.environment,
          // The profile's limits hold for every group; a claim cannot change them.
          enforcement: {
            backend: BACKEND_NAME,
            isolation: aciStandbyPoolBackend.enforcement.isolation,
            egress: { kind: request.egress.kind },
            limits: {
              memoryLimitMb: facts.memoryLimitMb,
              ...(facts.maxProcesses !== undefined ? { maxProcesses: facts.maxProcesses } : {}),
            },
            mounts: enforcedLayoutMounts(layout),
          },
          emit: context.emit,
          release: (releaseSignal) => claims.release(groupName, releaseSignal),
          explainLoss: () =>
            claims.whyGone(groupName, AbortSignal.timeout(EXPLAIN_LOSS_TIMEOUT_MS)),
        })
        step('agent.working-directory')
        await sandbox.prepareWorkingDirectory(signal)
        step('ready')
        return sandbox
      },
    )
  }

  return {
    tier: 'container',
    name: BACKEND_NAME,
    create,
    async close() {
      await client.close()
    },
  }
}
