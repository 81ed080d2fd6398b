import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import { SandboxBackendUnavailableError } from '@cordon/core'
import Docker from 'dockerode'

export const DEFAULT_SOCKET_PATH = '/var/run/docker.sock'

export interface EngineConnection {
  readonly docker: Docker
  /** Where the engine is: a socket path or a URL. */
  readonly endpoint: string
  /**
   * The engine as error messages name it: the endpoint, or
   * `DOCKER_HOST=<value>` when that variable chose it, so that a person
   * sees which setting to fix.
   */
  readonly description: string
  /** The unix socket path when the engine is local; used to refuse mounting it. */
  readonly socketPath: string | undefined
}

/**
 * Connects to the engine the config names: an explicit socket, an explicit TCP
 * host (with TLS when given), else `DOCKER_HOST`, else the local socket. No I/O
 * happens here; dockerode connects on the first request. A `DOCKER_HOST`
 * that names no address at all is refused here with
 * `SandboxBackendUnavailableError`, as an engine that cannot be reached is.
 */
export function connectEngine(
  config: Pick<ContainerBackendConfig, 'socketPath' | 'host' | 'port' | 'tls'>,
  env: NodeJS.ProcessEnv = process.env,
): EngineConnection {
  if (config.host) {
    const protocol = config.tls ? 'https' : 'http'
    const port = config.port ?? (config.tls ? 2376 : 2375)
    const endpoint = `${protocol}://${config.host}:${port}`
    return {
      docker: new Docker({
        protocol,
        host: config.host,
        port,
        ...(config.tls ? { ca: config.tls.ca, cert: config.tls.cert, key: config.tls.key } : {}),
      }),
      endpoint,
      description: endpoint,
      socketPath: undefined,
    }
  }
  const fromEnv = config.socketPath ? undefined : env.DOCKER_HOST || undefined
  if (fromEnv && !fromEnv.startsWith('unix://')) {
    let docker: Docker
    try {
      // dockerode reads DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH itself.
      docker = new Docker()
    } catch (error) {
      throw new SandboxBackendUnavailableError(
        'container:docker',
        `DOCKER_HOST=${fromEnv} names no Docker Engine (${error instanceof Error ? error.message : String(error)}); set it to unix:///path/to/docker.sock or tcp://host:port, or unset it to use unix://${DEFAULT_SOCKET_PATH}`,
        { cause: error },
      )
    }
    return {
      docker,
      endpoint: fromEnv,
      description: `DOCKER_HOST=${fromEnv}`,
      socketPath: undefined,
    }
  }
  const socketPath =
    config.socketPath ?? (fromEnv ? fromEnv.slice('unix://'.length) : DEFAULT_SOCKET_PATH)
  const endpoint = `unix://${socketPath}`
  return {
    docker: new Docker({ socketPath }),
    endpoint,
    description: fromEnv ? `DOCKER_HOST=${fromEnv}` : endpoint,
    socketPath,
  }
}
