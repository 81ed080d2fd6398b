import { type Duplex, PassThrough } from 'node:stream'
import type { MuxStream, StreamOpening } from '@cordon/agent/protocol'
import { StdioChannel, type StdioChannelOptions } from '@cordon/agent/sandbox'
import type Docker from 'dockerode'

/**
 * The host's end of a cordon container's only channel: the engine's attach to
 * the container's stdin and stdout, carrying the agent's stdio channel. It
 * needs no network path between host and container and nothing the sandbox
 * could reach, works the same with a remote engine and under gVisor, and a
 * round trip over it costs about half a millisecond, against some 70 for the
 * engine's exec API.
 *
 * The container is started with `StdinOnce`: when this attach goes away,
 * because the host closed it or died, the container's stdin closes and its
 * entry process ends (the engine then removes the container).
 */
export async function attachChannel(
  container: Docker.Container,
  docker: Docker,
  onStream?: (stream: MuxStream, opening: StreamOpening) => void,
): Promise<StdioChannel> {
  // Attached before the container starts, so nothing it writes is missed.
  const socket = (await container.attach({
    stream: true,
    hijack: true,
    stdin: true,
    stdout: true,
    stderr: true,
  })) as Duplex
  return new StdioChannel(engineStreamCarrier(socket, demuxEngineStream(socket, docker), onStream))
}

/**
 * Starts `command` in the container with the engine's exec, as root, its
 * stdio attached and hijacked (the socket pipe and the relay: programs that
 * reach the agent's root-only direct socket from inside and speak to the
 * host over their stdio), with what it writes split by
 * {@link demuxEngineStream}.
 */
export async function startAttachedRootExec(
  docker: Docker,
  containerId: string,
  command: readonly string[],
): Promise<{ exec: Docker.Exec; socket: Duplex; demuxed: DemuxedEngineStream }> {
  const exec = await docker.getContainer(containerId).exec({
    Cmd: [...command],
    User: '0:0',
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  })
  const socket = (await exec.start({ hijack: true, stdin: true })) as Duplex
  return { exec, socket, demuxed: demuxEngineStream(socket, docker) }
}

/** What an agent writes on a hijacked engine stream (an attach, or an exec started with stdin), and its log, apart. */
export interface DemuxedEngineStream {
  /** Ends with the engine stream. */
  readonly stdout: PassThrough
  readonly stderr: PassThrough
}

export function demuxEngineStream(socket: Duplex, docker: Docker): DemuxedEngineStream {
  const stdout = new PassThrough({ highWaterMark: 256 * 1024 })
  const stderr = new PassThrough()
  docker.modem.demuxStream(socket, stdout, stderr)
  socket.on('end', () => stdout.end())
  socket.on('close', () => stdout.end())
  return { stdout, stderr }
}

/** A channel's carrier over a hijacked engine stream, split by {@link demuxEngineStream}. */
export function engineStreamCarrier(
  socket: Duplex,
  { stdout, stderr }: DemuxedEngineStream,
  onStream?: (stream: MuxStream, opening: StreamOpening) => void,
): StdioChannelOptions {
  return {
    fromAgent: stdout,
    toAgent: socket,
    keepAlive: socket as { ref?(): unknown; unref?(): unknown },
    agentLog: stderr,
    ...(onStream ? { onStream } : {}),
    closeCarrier: () => {
      socket.end()
      socket.destroy()
    },
  }
}
