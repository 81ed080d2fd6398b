import { rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { newAgentSecret } from '@cordon/agent/protocol'
import { AgentClient, AgentSandbox, waitForAgent } from '@cordon/agent/sandbox'
import { type SandboxBackendOptions, SandboxReadinessError } from '@cordon/core'
import {
  type CordonSandboxBackend,
  parseBackendConfig,
  resolveBackendOptions,
  runCreateSequence,
  type SandboxBackendContext,
  type SandboxBackendFactory,
} from '@cordon/core/backend'
import { type AgentChild, startAgentChild } from './agent-child.js'
import { BACKEND_NAME, localBackend } from './definition.js'
import type { LocalBackendConfig } from './local-config.js'
import { checkLocalLayout, mapWorkingDirectory } from './local-layout.js'
import { measureLocalUsage } from './process-usage.js'
import { makeSandboxDirectory, type SandboxDirectory, sweepDeadOwners } from './workspace.js'

/** Default budget of `create()`: the agent started and answering. */
export const DEFAULT_READY_TIMEOUT_MS = 30_000

/**
 * The variable every command of a local sandbox carries (its sandbox id),
 * so its usage counts a command that left the agent's process tree.
 */
export const SANDBOX_ID_VARIABLE = 'CORDON_SANDBOX_ID'

/** How long the agent has to end after its stdin closed before it is killed. */
const AGENT_STOP_GRACE_MS = 5_000

/**
 * The `process:local` backend: each sandbox is cordon's agent as a child
 * process of the host, in a temporary workspace, with no isolation.
 *
 * `create()` removes the workspaces of dead owners under `workspaceParent`
 * (once per backend), makes a workspace owned by this process, starts the
 * agent and resolves when it answers over its stdio. `destroy()` closes the
 * agent's stdin (it kills every process of its commands and exits) and
 * removes the workspace.
 *
 * Construction does no I/O.
 */
export const createBackend: SandboxBackendFactory<LocalBackendConfig> = (input, context) =>
  createLocalBackend(input, context)

export function createLocalBackend(
  input: LocalBackendConfig,
  context: SandboxBackendContext,
): CordonSandboxBackend {
  const config = parseBackendConfig(localBackend, input)
  const parent = config.workspaceParent ?? tmpdir()
  const readyTimeoutMs = config.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS
  const nodePath = config.nodePath ?? process.execPath
  const outputsPath = checkLocalLayout(context.layout)
  let swept: Promise<unknown> | undefined

  const create = async (backendOptions: SandboxBackendOptions): Promise<AgentSandbox> => {
    const request = resolveBackendOptions(backendOptions, localBackend, config)
    let directory: SandboxDirectory | undefined
    let agent: AgentChild | undefined
    const release = async (): Promise<void> => {
      if (agent) await stopAgent(agent)
      if (directory) await rm(directory.dir, { recursive: true, force: true })
    }
    return runCreateSequence(
      {
        sandboxId: request.id,
        backend: BACKEND_NAME,
        timeoutMs: readyTimeoutMs,
        signal: request.signal,
        onStep: request.onStep,
        emit: context.emit,
        firstStep: 'workspace.sweep',
        cleanup: release,
        cleanupWhat: 'stopping the agent and removing the workspace',
      },
      async ({ signal, step }) => {
        swept ??= sweepDeadOwners(parent).catch(() => [])
        await swept
        step('workspace.create')
        directory = await makeSandboxDirectory(parent, context.providerId, request.id)
        const { workspace } = directory
        step('agent.start')
        const secret = newAgentSecret()
        agent = startAgentChild({ nodePath, workspace, secret })
        const started = agent
        const client = new AgentClient({
          secret,
          description: `local agent (pid ${started.child.pid ?? 'not started'})`,
          dial: async (_attempt, kind) => {
            if (started.channel.isClosed) throw agentEnded(started, request.id)
            return started.channel.open({ kind })
          },
          onSpare: (stream, spare) => started.channel.setSpare(stream, spare),
        })
        step('agent.health')
        const health = await Promise.race([
          waitForAgent(client, request.id, signal),
          started.exited.then(() => {
            throw agentEnded(started, request.id)
          }),
        ])
        const rootPid = started.child.pid!
        const marker = { variable: SANDBOX_ID_VARIABLE, value: request.id }
        const made = new AgentSandbox({
          id: request.id,
          rootDir: workspace,
          writeRoots: health.writeRoots,
          env: { ...request.env, [SANDBOX_ID_VARIABLE]: request.id },
          workingDirectory: mapWorkingDirectory(request.workingDirectory, outputsPath, workspace),
          execTimeoutMs: request.execTimeoutMs,
          client,
          backend: BACKEND_NAME,
          environment: localBackend.enforcement.environment,
          enforcement: {
            backend: BACKEND_NAME,
            isolation: localBackend.enforcement.isolation,
            runtime: 'local',
            egress: { kind: request.egress.kind },
            limits: {},
            ...(process.getuid && process.getgid
              ? { user: { uid: process.getuid(), gid: process.getgid() } }
              : {}),
            mounts: [{ path: workspace, access: 'read-write', noexec: false }],
          },
          emit: context.emit,
          release,
          agentMeasuresUsage: false,
          measureUsage: () => measureLocalUsage(rootPid, marker, workspace),
          explainLoss: async () =>
            started.channel.isClosed || started.child.exitCode !== null ? 'lost' : undefined,
        })
        step('agent.working-directory')
        await made.prepareWorkingDirectory(signal)
        step('ready')
        return made
      },
    )
  }

  return {
    tier: localBackend.tier,
    name: BACKEND_NAME,
    create,
    async close() {
      // Sandboxes are their owner's to destroy; nothing else is shared.
    },
  }
}

function agentEnded(agent: AgentChild, sandboxId: string): SandboxReadinessError {
  const log = agent.channel.log.trim()
  return new SandboxReadinessError(
    `the local agent ended before it answered${agent.child.exitCode !== null ? ` (exit ${agent.child.exitCode})` : ''}${log ? `: ${log.slice(-1_000)}` : ''}`,
    sandboxId,
  )
}

/** Closes the agent's stdin (it ends, killing what its commands left), then kills it if it lingers. */
async function stopAgent(agent: AgentChild): Promise<void> {
  agent.channel.close()
  const timer = setTimeout(() => agent.child.kill('SIGKILL'), AGENT_STOP_GRACE_MS)
  try {
    await agent.exited
  } finally {
    clearTimeout(timer)
  }
}
