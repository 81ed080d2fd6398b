/**
 * The host's link to the agent in a claimed group: TCP to the group's
 * address, the per-claim secret proved on every connection, and the Sandbox
 * built on it.
 *
 * The agent-backed Sandbox (commands, processes, files, error mapping) and
 * the agent client with its retrying, authenticating `open()` are generic,
 * and today live in @cordon/backend-microvm. They are imported from there by
 * relative path until they move into @cordon/agent (see the MOVE notes); this
 * file is the only place that touches them. The client can only dial unix,
 * vsock and TLS endpoints, so until the move gives it a `dial` option, a
 * private unix socket in a 0700 directory relays each connection to the
 * agent's TCP port. The secret is still proved end to end through it.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { HealthOkMessage } from '@cordon/agent/protocol'
import { type SandboxEvent, type SandboxId, SandboxReadinessError } from '@cordon/core'
// MOVE: AgentSandbox in @cordon/agent (generalised MicroVMSandbox: a backend name for events and a `release(signal)` instead of the control-plane client).
import { MicroVMSandbox } from '../../backend-microvm/dist/microvm-sandbox.js'
// MOVE: AgentClient in @cordon/agent (VsockAgentTransport without its dialling, taking `dial(signal): Promise<Duplex>`); the relay below becomes a plain TCP dial.
import { VsockAgentTransport } from '../../backend-microvm/dist/vsock-agent-transport.js'
import { BACKEND_NAME } from './aci-defaults.js'

export interface AgentLinkOptions {
  readonly host: string
  readonly port: number
  readonly secret: string
}

export interface AgentSandboxInit {
  readonly id: SandboxId
  readonly rootDir: string
  readonly env: Readonly<Record<string, string>>
  readonly workingDirectory: string | undefined
  readonly emit: (event: SandboxEvent) => void
  /** Deletes the container group; the sandbox's `destroy()` calls it. */
  readonly release: (signal: AbortSignal | undefined) => Promise<void>
}

export interface AgentLink {
  /** Polls the agent's health until it answers, within the signal. */
  waitForAgent(sandboxId: string, signal: AbortSignal): Promise<HealthOkMessage>
  /** The exec-ready Sandbox; its `destroy()` releases the group, then this link. */
  sandbox(init: AgentSandboxInit): MicroVMSandbox
  close(): Promise<void>
}

export async function openAgentLink(options: AgentLinkOptions): Promise<AgentLink> {
  const relay = await startTcpRelay(options.host, options.port)
  const endpoint = { kind: 'unix', path: relay.path } as const
  const description = `tcp:${options.host}:${options.port}`
  const transport = new VsockAgentTransport(endpoint, { secret: options.secret })
  // While the group's agent starts, a refused connection is expected: keep dialling until the deadline.
  const readiness = new VsockAgentTransport(endpoint, {
    secret: options.secret,
    maxConnectAttempts: Number.MAX_SAFE_INTEGER,
    retryDelayMs: 25,
  })
  // Errors should name the agent's address, not the private relay socket.
  for (const client of [transport, readiness])
    (client as { description: string }).description = description

  return {
    async waitForAgent(sandboxId, signal) {
      try {
        return await readiness.health(signal)
      } catch (error) {
        if (signal.aborted) throw error
        throw new SandboxReadinessError(
          `the agent in sandbox ${sandboxId} at ${description} cannot be used: ${(error as Error).message}`,
          sandboxId,
          { cause: error },
        )
      }
    },
    sandbox(init) {
      return new MicroVMSandbox({
        id: init.id,
        rootDir: init.rootDir,
        env: init.env,
        workingDirectory: init.workingDirectory,
        transport,
        // MOVE: becomes AgentSandbox's `release`; MicroVMSandbox calls only deleteSandbox(id, signal).
        controlPlane: {
          deleteSandbox: async (_id: string, signal?: AbortSignal) => {
            await init.release(signal)
            await relay.close()
          },
        } as unknown as ConstructorParameters<typeof MicroVMSandbox>[0]['controlPlane'],
        // MOVE: AgentSandbox takes the backend name; MicroVMSandbox names itself microvm:self-hosted.
        emit: (event) =>
          init.emit('backend' in event ? { ...event, backend: BACKEND_NAME } : event),
      })
    },
    close: () => relay.close(),
  }
}

interface TcpRelay {
  readonly path: string
  close(): Promise<void>
}

/** A unix socket, private to this process's user, that forwards each connection to host:port. */
async function startTcpRelay(host: string, port: number): Promise<TcpRelay> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-aci-'))
  const path = join(dir, 'agent.sock')
  const open = new Set<Socket>()
  const server: Server = createServer((local) => {
    const remote = connect({ host, port, noDelay: true })
    open.add(local)
    open.add(remote)
    const drop = (): void => {
      local.destroy()
      remote.destroy()
    }
    // A failure on either side ends both (a refused dial reaches the client as a
    // connection closed before the agent's hello, which it retries). A clean end
    // travels through the pipes, so the agent's last frames are flushed first.
    local.on('error', drop)
    remote.on('error', drop)
    // The client hanging up must reach the agent, which then kills the command.
    local.on('close', () => {
      remote.destroy()
      open.delete(local)
    })
    remote.on('close', () => open.delete(remote))
    local.pipe(remote)
    remote.pipe(local)
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(path, () => {
      server.off('error', reject)
      resolve()
    })
  })
  let closing: Promise<void> | undefined
  return {
    path,
    close() {
      closing ??= (async () => {
        for (const socket of open) socket.destroy()
        await new Promise<void>((resolve) => server.close(() => resolve()))
        await rm(dir, { recursive: true, force: true })
      })()
      return closing
    },
  }
}
