import { Duplex, type Readable, type Writable } from 'node:stream'
import type { MuxStream, StreamOpening } from '@cordon/agent/protocol'
import { type AgentClient, StdioChannel } from '@cordon/agent/sandbox'
import { type BrokeredCredential, SandboxControlRefusedError, type SandboxId } from '@cordon/core'
import type Docker from 'dockerode'
import { startSocketPipe } from './agent-socket-pipe.js'
import type { EgressGateway } from './egress-gateway.js'
import { type ProxiedPolicy, SandboxEgress } from './sandbox-egress.js'

/**
 * The egress of a detached sandbox while a host that connected to it holds
 * it. The sandbox's proxy port turns each connection into an `egress` stream
 * its agent opens on its session; a detached agent whose creator has gone
 * has no session, and refuses them all (no host, no egress). A host that
 * connects registers the sandbox at its own provider's gateway with the
 * policy the creator registered (kept in the credential, never on the
 * engine), with its own provider's brokered credentials, and asks the agent
 * for its session on a connection of its own (`adopt-session`, after
 * proving the secret): a plain connection to the direct socket where the
 * host can dial it (runc on this machine's engine), else the engine's exec
 * of the socket pipe (`--pipe`: gVisor, a remote engine). From then on each
 * `egress` stream joins the gateway as that sandbox's. Closed (disconnect,
 * destroy, this host's end), the connection ends and the agent refuses
 * egress again. One host holds it at a time: the agent refuses a second.
 */
export interface DetachedEgress {
  /** Ends the session and the gateway registration. */
  close(): Promise<void>
}

export async function holdDetachedEgress(options: {
  readonly docker: Docker
  readonly containerId: string
  readonly sandboxId: SandboxId
  readonly backend: string
  /** The container's entry (the socket pipe is started from it). */
  readonly entrypoint: readonly string[]
  readonly policy: ProxiedPolicy
  readonly gateway: EgressGateway
  readonly brokeredCredentials: readonly BrokeredCredential[]
  readonly client: AgentClient
  /** A connection to the agent's direct socket, where this host can dial it. */
  readonly dialDirect: ((signal: AbortSignal) => Promise<Duplex>) | undefined
  readonly signal: AbortSignal | undefined
}): Promise<DetachedEgress> {
  const { sandboxId, gateway } = options
  const signal = options.signal ?? new AbortController().signal
  // Registered here already (created or connected in this provider): a second
  // registration's failure would remove the first's.
  if (gateway.has(sandboxId))
    throw new SandboxControlRefusedError(
      'egress',
      options.backend,
      "this provider holds the sandbox's egress already (it is connected here); one host holds it at a time",
    )
  const registration = await SandboxEgress.register(
    gateway,
    sandboxId,
    options.policy,
    options.brokeredCredentials,
    () => {},
  )
  let carrier: Duplex | undefined
  let keepAlive: { ref?(): unknown; unref?(): unknown } | undefined
  let channel: StdioChannel | undefined
  try {
    if (options.dialDirect) {
      carrier = await options.dialDirect(signal)
      keepAlive = carrier as { ref?(): unknown; unref?(): unknown }
    } else {
      const pipe = await startSocketPipe(options.docker, options.containerId, options.entrypoint)
      pipe.demuxed.stderr.resume()
      keepAlive = pipe.socket as { ref?(): unknown; unref?(): unknown }
      carrier = new PipeStream(pipe.demuxed.stdout, pipe.socket)
    }
    const stream = await options.client.adoptSession(carrier, signal).catch((error: unknown) => {
      if (SandboxControlRefusedError.isInstance(error))
        throw new SandboxControlRefusedError(
          'egress',
          options.backend,
          `the sandbox's agent would not hand this host its egress: ${error.message}`,
          { cause: error },
        )
      throw error
    })
    const held = stream
    channel = new StdioChannel({
      fromAgent: held,
      toAgent: held,
      keepAlive,
      onStream: (muxStream: MuxStream, opening: StreamOpening) => {
        if (opening.kind === 'egress') gateway.connect(sandboxId, muxStream)
        else muxStream.destroy()
      },
      closeCarrier: () => held.destroy(),
    })
  } catch (error) {
    carrier?.destroy()
    await registration.close()
    throw error
  }
  const session = channel
  return {
    async close() {
      session.close()
      await registration.close()
    },
  }
}

/**
 * The socket pipe's stdio as one stream: what the agent writes (the exec's
 * stdout, split from its stderr) is read, and writes go to the exec's stdin.
 * Bytes put back with `unshift` (those after the answer to `adopt-session`)
 * are read first.
 */
class PipeStream extends Duplex {
  constructor(
    private readonly input: Readable,
    private readonly output: Writable,
  ) {
    super({ allowHalfOpen: true })
    input.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) input.pause()
    })
    input.on('end', () => this.push(null))
    input.on('error', (error: Error) => this.destroy(error))
    output.on('error', (error: Error) => this.destroy(error))
  }

  override _read(): void {
    this.input.resume()
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void) {
    this.output.write(chunk, done)
  }

  override _final(done: (error?: Error | null) => void): void {
    this.output.end()
    done()
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    this.input.destroy()
    this.output.destroy()
    done(error)
  }
}
