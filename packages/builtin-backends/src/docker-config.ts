import type { TlsClientMaterial } from '@cordon/core'
import { durationMsSchema, tcpPortSchema, tlsClientSchema } from '@cordon/core/backend'
import { z } from 'zod'
import { imageReferenceProblem, REGISTRY_HOST, registryHostKey } from './image-reference-syntax.js'

/** Credentials for one container registry: what `docker login` would take. */
export interface RegistryCredential {
  readonly username: string
  /** The password, or an access token the registry accepts in its place. */
  readonly password: string
}

/**
 * `container` tier on a Docker Engine, with runc or gVisor (`runsc`). The
 * first six fields are the reference's.
 */
export interface ContainerBackendConfig {
  readonly tier: 'container'
  /**
   * The container runtime: `docker` (the default) is the engine's default
   * runtime, runc on a stock engine; `runc` asks the engine for runc by
   * name, whatever its default; `runsc` is gVisor.
   */
  readonly runtime?: 'docker' | 'runc' | 'runsc'
  /**
   * Image to start per sandbox. It needs only the commands you will run in
   * it. When the engine does not have it, the first `create()` pulls it (as
   * `docker run` does), within that create's deadline.
   */
  readonly image: string
  /**
   * Credentials for pulling from registries that need them, by registry
   * host as it appears in image names (`ghcr.io`, `registry.example.com:5000`;
   * `docker.io` for Docker Hub). A pull sends the engine the credential of
   * the image's own registry only. Never logged, labelled or put in an
   * error or event.
   */
  readonly registryAuth?: Readonly<Record<string, RegistryCredential>>
  /**
   * The reference's choice of how the host reached its in-container worker.
   * cordon reaches every sandbox through the engine's API and needs no network
   * path to it, so any value is refused with `SandboxControlRefusedError`:
   * remove the field.
   */
  readonly hostReachability?: 'host-port' | 'container-network'
  /**
   * The container network. `none` is what cordon always does (the sandbox has
   * no interface but loopback; egress goes through the gateway). Any other
   * network would give the sandbox a route of its own, so it is refused with
   * `SandboxControlRefusedError`: choose an egress policy instead.
   */
  readonly network?: 'none' | 'bridge' | (string & {})
  /** Extra labels on every resource this backend creates. `cordon.*` keys are reserved. */
  readonly labels?: Readonly<Record<string, string>>
  /** How long `create()` may take to reach exec-ready (default 30 s). */
  readonly readyTimeoutMs?: number
  /** Engine unix socket; default `DOCKER_HOST` if set, else `/var/run/docker.sock`. */
  readonly socketPath?: string
  /** Engine TCP address instead of a socket. */
  readonly host?: string
  readonly port?: number
  readonly tls?: TlsClientMaterial
  /**
   * `uid:gid` the sandbox's commands run as. Default: a uid of the sandbox's
   * own above 2^30, so per-user kernel limits are per sandbox and no host
   * account's. Root (`0`) is refused.
   */
  readonly user?: string
  /** CPU limit in cores (default 1). */
  readonly cpus?: number
  /** Size of the writable `/tmp` tmpfs in MiB (default 64). */
  readonly tmpfsSizeMb?: number
  /**
   * Mount `/tmp` `noexec`, so no program written there can be run (default
   * false: it can, as on a layout mount without `noexec`; see
   * `ContainerSandboxLayoutMount.noexec`).
   */
  readonly tmpfsNoexec?: boolean
  /**
   * Fixed name-to-address entries for the gateway's resolver, for internal
   * services a policy names (pair them with the provider's `allowInwardFor`).
   */
  readonly gatewayHosts?: Readonly<Record<string, string>>
  /** Ports the gateway lets sandboxes reach (default 80 and 443). */
  readonly gatewayAllowedPorts?: readonly number[]
  /** Extra CA certificates (PEM) the gateway trusts for upstream HTTPS, e.g. an internal CA. */
  readonly gatewayUpstreamCa?: string
  /**
   * Remove, once in the background when the first sandbox is created, what
   * providers on this host that died left on the engine (only resources
   * whose owner process is provably gone, or whose lifetime passed). Default
   * true; `cordon gc` does the same on demand.
   */
  readonly sweepDeadOwners?: boolean
  /**
   * How long a snapshot (`sandbox.snapshot()`) is kept, in ms: the sweep
   * above and `cordon gc` remove snapshots older than this (default 7
   * days, `DEFAULT_SNAPSHOT_RETENTION_MS` of `@cordon/backend-docker`), with no regard to who took them.
   */
  readonly snapshotRetentionMs?: number
}

const labelsSchema = z
  .record(
    z
      .string()
      .regex(/^[a-z0-9][a-z0-9._/-]*$/i, 'label keys use letters, digits, ".", "_", "-", "/"'),
    z.string(),
  )
  .readonly()

const registryCredentialSchema: z.ZodType<RegistryCredential> = z
  .object({ username: z.string().min(1), password: z.string().min(1) })
  .strict()
  .readonly()

const registryAuthSchema = z
  .record(z.string(), registryCredentialSchema)
  .readonly()
  .superRefine((auth, ctx) => {
    const seen = new Map<string, string>()
    for (const key of Object.keys(auth)) {
      if (!REGISTRY_HOST.test(key)) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message:
            'registry keys are hosts as image names spell them, e.g. "ghcr.io", "registry.example.com:5000" or "docker.io" (no scheme, no path)',
        })
        continue
      }
      const registry = registryHostKey(key)
      const earlier = seen.get(registry)
      if (earlier !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message: `names the same registry as "${earlier}"; give one credential per registry`,
        })
      }
      seen.set(registry, key)
    }
  })

export const containerBackendConfigSchema: z.ZodType<ContainerBackendConfig> = z
  .object({
    tier: z.literal('container'),
    runtime: z.enum(['docker', 'runc', 'runsc']).optional(),
    image: z
      .string()
      .min(1)
      .superRefine((image, ctx) => {
        const problem = imageReferenceProblem(image)
        if (problem) ctx.addIssue({ code: 'custom', message: problem })
      }),
    registryAuth: registryAuthSchema.optional(),
    hostReachability: z.enum(['host-port', 'container-network']).optional(),
    network: z.string().min(1).optional(),
    labels: labelsSchema
      .refine(
        (labels) => Object.keys(labels).every((key) => !key.startsWith('cordon.')),
        'label keys starting with "cordon." are reserved',
      )
      .optional(),
    readyTimeoutMs: durationMsSchema().optional(),
    socketPath: z.string().min(1).optional(),
    host: z.string().min(1).optional(),
    port: tcpPortSchema().optional(),
    tls: tlsClientSchema.optional(),
    user: z
      .string()
      .regex(/^\d+(:\d+)?$/, 'user must be numeric "uid" or "uid:gid"')
      .refine((user) => !/^0+(:|$)/.test(user), 'running the sandbox as root is refused')
      .optional(),
    cpus: z.number().positive().max(1024).optional(),
    tmpfsSizeMb: z.number().int().positive().optional(),
    tmpfsNoexec: z.boolean().optional(),
    gatewayHosts: z.record(z.string().min(1), z.string().min(1)).readonly().optional(),
    gatewayAllowedPorts: z.array(tcpPortSchema()).readonly().optional(),
    gatewayUpstreamCa: z.string().min(1).optional(),
    sweepDeadOwners: z.boolean().optional(),
    snapshotRetentionMs: z.number().int().positive().optional(),
  })
  .strict()
  .readonly()
  .superRefine((config, ctx) => {
    if (config.socketPath && config.host) {
      ctx.addIssue({
        code: 'custom',
        path: ['host'],
        message: 'give either socketPath or host, not both',
      })
    }
    if (config.tls && !config.host) {
      ctx.addIssue({ code: 'custom', path: ['tls'], message: 'tls needs a TCP host' })
    }
  })
