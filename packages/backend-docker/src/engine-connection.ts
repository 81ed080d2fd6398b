import type { ContainerBackendConfig } from '@cordon/core'
import Docker from 'dockerode'

export const DEFAULT_SOCKET_PATH = '/var/run/docker.sock'

export interface EngineConnection {
  readonly docker: Docker
  /** Where the engine is, for error messages: a socket path or a URL. */
  readonly endpoint: string
  /** The unix socket path when the engine is local; used to refuse mounting it. */
  readonly socketPath: string | undefined
}

/**
 * Connects to the engine the config names: an explicit socket, an explicit TCP
 * host (with TLS when given), else `DOCKER_HOST`, else the local socket. No I/O
 * happens here; dockerode connects on the first request.
 */
export function connectEngine(
  config: Pick<ContainerBackendConfig, 'socketPath' | 'host' | 'port' | 'tls'>,
  env: NodeJS.ProcessEnv = process.env,
): EngineConnection {
  if (config.host) {
    const protocol = config.tls ? 'https' : 'http'
    const port = config.port ?? (config.tls ? 2376 : 2375)
    return {
      docker: new Docker({
        protocol,
        host: config.host,
        port,
        ...(config.tls ? { ca: config.tls.ca, cert: config.tls.cert, key: config.tls.key } : {}),
      }),
      endpoint: `${protocol}://${config.host}:${port}`,
      socketPath: undefined,
    }
  }
  const fromEnv = env.DOCKER_HOST
  if (!config.socketPath && fromEnv && !fromEnv.startsWith('unix://')) {
    // dockerode reads DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH itself.
    return { docker: new Docker(), endpoint: fromEnv, socketPath: undefined }
  }
  const socketPath =
    config.socketPath ?? (fromEnv ? fromEnv.slice('unix://'.length) : DEFAULT_SOCKET_PATH)
  return { docker: new Docker({ socketPath }), endpoint: `unix://${socketPath}`, socketPath }
}
