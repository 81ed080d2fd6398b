import type { Buffer } from 'node:buffer'
import { z } from 'zod'
import { type EgressPolicy, egressPolicySchema } from './egress-policy.js'
import { type SandboxConfigIssue, SandboxConfigValidationError } from './errors.js'
import type { SandboxEventListener } from './events.js'
import { type ContainerSandboxLayout, containerSandboxLayoutSchema } from './layout.js'

/** Client certificate material for TLS (engine, control plane, agent relay): PEM text or bytes. */
export interface TlsClientMaterial {
  /** CA that signs the server's certificate; default: Node's bundled roots. */
  readonly ca?: string | Buffer
  readonly cert: string | Buffer
  readonly key: string | Buffer
  readonly servername?: string
}

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
}

/** `container` tier claimed from an Azure Container Instances standby pool (the reference's fields first). */
export interface ACIStandbyPoolBackendConfig {
  readonly tier: 'container'
  readonly runtime: 'aci-standby-pool'
  readonly subscriptionId: string
  readonly resourceGroup: string
  readonly location: string
  readonly standbyPoolResourceId: string
  readonly containerGroupProfileResourceId: string
  readonly containerGroupProfileRevision?: number
  /** Returns a bearer token for Azure Resource Manager; called before every request. */
  readonly getArmToken: () => Promise<string>
  /** Delegated subnet the claimed groups join; required unless `allowPublicAddress` is set. */
  readonly subnetId?: string
  /** Delay between the agent health probes while a claim comes up (default 500 ms). */
  readonly readyPollIntervalMs?: number
  /** Budget for a claim to become exec-ready (default 60 s). */
  readonly readyTimeoutMs?: number
  /** Port the cordon agent in each group listens on (default 2024). */
  readonly workerPort?: number
  readonly armApiVersion?: string
  /** Prefix of the claimed group names (default `cordon`). */
  readonly containerNamePrefix?: string
  /** Opt in to a public IP for claimed groups when no subnet is given. */
  readonly allowPublicAddress?: boolean
  /** Azure Resource Manager's base URL (default the public cloud's). */
  readonly armEndpoint?: string
}

/** A per-agent snapshot the orchestrator resumes instead of a fresh template. */
export interface AgentSnapshotRef {
  readonly orgId: string
  readonly agentId: string
  readonly version: string
}

/** `microvm` tier against a guest orchestrator's control plane (the reference's fields). */
export interface MicroVMBackendConfig {
  readonly tier: 'microvm'
  readonly service: 'self-hosted'
  readonly orchestratorEndpoint: string
  /** Returns the control plane's bearer token; called before every request. */
  readonly getToken: () => Promise<string>
  /** Template (golden snapshot) to resume. */
  readonly template?: string
  readonly agentSnapshot?: AgentSnapshotRef
  /** Guest vsock port of the agent when the control plane names none (default 1024). */
  readonly agentVsockPort?: number
  /** Budget for a guest to become exec-ready after the claim (default 60 s). */
  readonly readyTimeoutMs?: number
  /** Delay between the agent health probes while a guest comes up (default 250 ms). */
  readonly readyPollIntervalMs?: number
  /** Client certificate for a `tls` (mTLS relay) agent endpoint. */
  readonly mtls?: TlsClientMaterial
  /** Client certificate for the control plane itself. */
  readonly controlPlaneMtls?: TlsClientMaterial
}

export type SandboxTier = 'container' | 'microvm'
export type SandboxBackendConfig =
  | ContainerBackendConfig
  | ACIStandbyPoolBackendConfig
  | MicroVMBackendConfig

/** A credential the egress gateway injects upstream; the sandbox never holds `value`. */
export interface BrokeredCredential {
  /** Exact host the credential is bound to. */
  readonly host: string
  /** Request header that carries it, e.g. `authorization`. */
  readonly header: string
  readonly value: string
  /**
   * If set, the sandbox sends this string and the gateway swaps it for `value`
   * on requests to `host` only; a request carrying it anywhere else is refused.
   * Without it, the gateway adds the header to every request to `host`.
   */
  readonly placeholder?: string
}

/** Settings every provider takes, whatever the backend. The first four are the reference's. */
export interface SandboxProviderConfigBase {
  /** Egress policy of a sandbox whose `create()` names none (default `deny-all`). */
  readonly defaultEgress?: EgressPolicy
  /** Default timeout of each `exec`, in ms, when neither the call nor the sandbox sets one (default 30 s). */
  readonly defaultTimeoutMs?: number
  readonly defaultMemoryLimitMb?: number
  readonly defaultMaxProcesses?: number
  /** Default lifetime of a sandbox, in ms; it is destroyed when this runs out (default: none). */
  readonly defaultLifetimeMs?: number
  /**
   * Default idle timeout, in ms: a sandbox that has run nothing for this long
   * (no exec, started process, terminal, file operation or forwarded
   * connection, and no `keepAlive`) is destroyed with end reason `idle`
   * (default: none).
   */
  readonly defaultIdleTimeoutMs?: number
  /** Keep this many exec-ready sandboxes started; `create()` claims one. */
  readonly pool?: { readonly size: number }
  /** Structured lifecycle, exec and egress events. Must not throw. */
  readonly onEvent?: SandboxEventListener
  /** Credentials the egress gateway injects; never visible inside the sandbox. */
  readonly brokeredCredentials?: readonly BrokeredCredential[]
  /** Host names whose private or loopback addresses the gateway may dial. */
  readonly allowInwardFor?: readonly string[]
}

export type SandboxProviderConfig =
  | (SandboxProviderConfigBase & {
      readonly backend: ContainerBackendConfig | ACIStandbyPoolBackendConfig
      readonly layout: ContainerSandboxLayout
    })
  | (SandboxProviderConfigBase & {
      readonly backend: MicroVMBackendConfig
      readonly layout?: undefined
    })

/** Per-sandbox settings for `provider.create()`; each falls back to the provider's default. */
export interface SandboxCreateConfig {
  /**
   * Default working directory of the sandbox's commands: absolute, or
   * relative to the sandbox's `rootDir` (default: `rootDir`, the outputs
   * path). `create()` makes it if it is missing, as the sandbox's user and
   * only inside a writable directory; otherwise `create()` is refused with
   * `SandboxConfigValidationError` naming `workingDirectory`.
   */
  readonly workingDirectory?: string
  /** Environment every command of the sandbox gets. */
  readonly env?: Readonly<Record<string, string>>
  /**
   * Default timeout of each `exec` in this sandbox, in ms (the reference's
   * meaning). It is not a lifetime: see `lifetimeMs`.
   */
  readonly timeoutMs?: number
  readonly memoryLimitMb?: number
  readonly maxProcesses?: number
  /** Aborts the creation; everything made so far is removed. */
  readonly signal?: AbortSignal
  /** Egress policy of this sandbox (default: the provider's `defaultEgress`). */
  readonly egress?: EgressPolicy
  /** Destroy the sandbox this many ms after it was handed out (default: the provider's `defaultLifetimeMs`). */
  readonly lifetimeMs?: number
  /** Destroy the sandbox once it has been idle this many ms (default: the provider's `defaultIdleTimeoutMs`). */
  readonly idleTimeoutMs?: number
}

const fn = <T>(message: string) => z.custom<T>((value) => typeof value === 'function', { message })
/** A duration Node's timers can hold. */
const durationMs = () => z.number().int().positive().max(2_147_483_647)
const positiveInt = () => z.number().int().positive()
const tcpPort = () => z.number().int().min(1).max(65535)
const pem = () =>
  z.union([
    z.string().min(1),
    z.custom<Buffer>(
      (value) => value instanceof Uint8Array && value.byteLength > 0,
      'expected PEM text or a non-empty Buffer',
    ),
  ])

const labelsSchema = z
  .record(
    z
      .string()
      .regex(/^[a-z0-9][a-z0-9._/-]*$/i, 'label keys use letters, digits, ".", "_", "-", "/"'),
    z.string(),
  )
  .readonly()

/** A registry host as image names spell it: `name[.name...][:port]`, no scheme or path. */
const REGISTRY_HOST =
  /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?$/i

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

/**
 * The registry a `registryAuth` key or an image name's host part stands for:
 * hosts compare without case, and Docker Hub's other names are `docker.io`.
 */
export function registryHostKey(host: string): string {
  const lower = host.toLowerCase()
  return lower === 'index.docker.io' || lower === 'registry-1.docker.io' ? 'docker.io' : lower
}

export const tlsClientSchema: z.ZodType<TlsClientMaterial> = z
  .object({
    ca: pem().optional(),
    cert: pem(),
    key: pem(),
    servername: z.string().optional(),
  })
  .strict()
  .readonly()

export const containerBackendConfigSchema: z.ZodType<ContainerBackendConfig> = z
  .object({
    tier: z.literal('container'),
    runtime: z.enum(['docker', 'runc', 'runsc']).optional(),
    image: z.string().min(1),
    registryAuth: registryAuthSchema.optional(),
    hostReachability: z.enum(['host-port', 'container-network']).optional(),
    network: z.string().min(1).optional(),
    labels: labelsSchema
      .refine(
        (labels) => Object.keys(labels).every((key) => !key.startsWith('cordon.')),
        'label keys starting with "cordon." are reserved',
      )
      .optional(),
    readyTimeoutMs: durationMs().optional(),
    socketPath: z.string().min(1).optional(),
    host: z.string().min(1).optional(),
    port: tcpPort().optional(),
    tls: tlsClientSchema.optional(),
    user: z
      .string()
      .regex(/^\d+(:\d+)?$/, 'user must be numeric "uid" or "uid:gid"')
      .refine((user) => !/^0+(:|$)/.test(user), 'running the sandbox as root is refused')
      .optional(),
    cpus: z.number().positive().max(1024).optional(),
    tmpfsSizeMb: positiveInt().optional(),
    tmpfsNoexec: z.boolean().optional(),
    gatewayHosts: z.record(z.string().min(1), z.string().min(1)).readonly().optional(),
    gatewayAllowedPorts: z.array(tcpPort()).readonly().optional(),
    gatewayUpstreamCa: z.string().min(1).optional(),
    sweepDeadOwners: z.boolean().optional(),
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

const azureResourceId = () => z.string().startsWith('/subscriptions/')

export const aciStandbyPoolBackendConfigSchema: z.ZodType<ACIStandbyPoolBackendConfig> = z
  .object({
    tier: z.literal('container'),
    runtime: z.literal('aci-standby-pool'),
    subscriptionId: z.string().min(1),
    resourceGroup: z.string().min(1),
    location: z.string().min(1),
    standbyPoolResourceId: azureResourceId(),
    containerGroupProfileResourceId: azureResourceId(),
    containerGroupProfileRevision: z.number().int().nonnegative().optional(),
    getArmToken: fn<() => Promise<string>>('getArmToken must be a function returning a token'),
    subnetId: azureResourceId().optional(),
    readyPollIntervalMs: durationMs().optional(),
    readyTimeoutMs: durationMs().optional(),
    workerPort: tcpPort().optional(),
    armApiVersion: z.string().min(1).optional(),
    containerNamePrefix: z
      .string()
      .regex(/^[a-z0-9-]{1,40}$/, 'lowercase letters, digits and "-", at most 40')
      .optional(),
    allowPublicAddress: z.boolean().optional(),
    armEndpoint: z.string().url().optional(),
  })
  .strict()
  .readonly()
  .superRefine((config, ctx) => {
    if (!config.subnetId && config.allowPublicAddress !== true) {
      ctx.addIssue({
        code: 'custom',
        path: ['subnetId'],
        message:
          'give a subnetId, or set allowPublicAddress: true to accept a public IP for each claimed group',
      })
    }
  })

export const agentSnapshotRefSchema: z.ZodType<AgentSnapshotRef> = z
  .object({ orgId: z.string().min(1), agentId: z.string().min(1), version: z.string().min(1) })
  .strict()
  .readonly()

export const microVMBackendConfigSchema: z.ZodType<MicroVMBackendConfig> = z
  .object({
    tier: z.literal('microvm'),
    service: z.literal('self-hosted'),
    orchestratorEndpoint: z.string().url(),
    getToken: fn<() => Promise<string>>('getToken must be a function returning a token'),
    template: z.string().min(1).optional(),
    agentSnapshot: agentSnapshotRefSchema.optional(),
    agentVsockPort: z.number().int().min(1).max(0xffffffff).optional(),
    readyTimeoutMs: durationMs().optional(),
    readyPollIntervalMs: durationMs().optional(),
    mtls: tlsClientSchema.optional(),
    controlPlaneMtls: tlsClientSchema.optional(),
  })
  .strict()
  .readonly()

export const brokeredCredentialSchema: z.ZodType<BrokeredCredential> = z
  .object({
    host: z.string().min(1),
    header: z.string().regex(/^[A-Za-z0-9-]+$/, 'header must be a plain header name'),
    value: z.string().min(1),
    placeholder: z.string().min(8).optional(),
  })
  .strict()
  .readonly()

const providerBaseShape = {
  defaultEgress: egressPolicySchema.optional(),
  defaultTimeoutMs: durationMs().optional(),
  defaultMemoryLimitMb: positiveInt().optional(),
  defaultMaxProcesses: positiveInt().optional(),
  defaultLifetimeMs: durationMs().optional(),
  defaultIdleTimeoutMs: durationMs().optional(),
  pool: z
    .object({ size: z.number().int().min(0).max(64) })
    .strict()
    .readonly()
    .optional(),
  onEvent: fn<SandboxEventListener>('onEvent must be a function').optional(),
  brokeredCredentials: z.array(brokeredCredentialSchema).readonly().optional(),
  allowInwardFor: z.array(z.string().min(1)).readonly().optional(),
}

const containerBackendShape = {
  backend: z.union([containerBackendConfigSchema, aciStandbyPoolBackendConfigSchema]),
}

/** Provider config for the container tier: a layout is required. */
export const containerProviderConfigSchema = z
  .object({
    ...providerBaseShape,
    ...containerBackendShape,
    layout: containerSandboxLayoutSchema,
  })
  .strict()
  .readonly()

/**
 * The container tier's provider config with the one backend schema its
 * `runtime` names (so that a mistyped field is reported by name rather than
 * as a union that matched neither backend), and its layout left to
 * `checkLayout`, whose problems are reported as the reference reported them
 * (`ContainerSandboxLayoutValidationError`).
 */
export function containerProviderFieldsSchemaFor(runtime: 'docker' | 'aci-standby-pool') {
  return z
    .object({
      ...providerBaseShape,
      backend:
        runtime === 'aci-standby-pool'
          ? aciStandbyPoolBackendConfigSchema
          : containerBackendConfigSchema,
      layout: z.unknown().refine((value) => value !== undefined, 'required for the container tier'),
    })
    .strict()
    .readonly()
}

/** Provider config for the microvm tier: the guest's files are the orchestrator's business. */
export const microVMProviderConfigSchema = z
  .object({
    ...providerBaseShape,
    backend: microVMBackendConfigSchema,
    layout: z.undefined().optional(),
  })
  .strict()
  .readonly()

const envSchema = z
  .record(
    z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment variable names are letters, digits and "_"'),
    z.string().refine((value) => !value.includes('\0'), 'environment values cannot contain NUL'),
  )
  .readonly()

/** Validates one environment map (names and values); shared by create and exec. */
export const environmentSchema = envSchema

export const sandboxCreateConfigSchema: z.ZodType<SandboxCreateConfig> = z
  .object({
    workingDirectory: z
      .string()
      .min(1, 'must not be empty')
      .refine((value) => !value.includes('\0'), 'cannot contain NUL')
      .optional(),
    env: envSchema.optional(),
    timeoutMs: durationMs().optional(),
    memoryLimitMb: positiveInt().optional(),
    maxProcesses: positiveInt().optional(),
    signal: z
      .custom<AbortSignal>((value) => value instanceof AbortSignal, 'signal must be an AbortSignal')
      .optional(),
    egress: egressPolicySchema.optional(),
    lifetimeMs: durationMs().optional(),
    idleTimeoutMs: durationMs().optional(),
  })
  .strict()
  .readonly()

/**
 * Parses `input` with `schema`; on failure throws one
 * {@link SandboxConfigValidationError} listing every problem (an unknown key
 * is a problem too).
 */
export function parseConfig<T>(schema: z.ZodType<T>, input: unknown, subject: string): T {
  const result = schema.safeParse(input)
  if (result.success) return result.data
  throw new SandboxConfigValidationError(subject, configIssues(result.error))
}

/**
 * A zod failure as config issues, `path` dotted. A refused record key (an
 * environment variable's name) says why, not only that it was refused.
 */
export function configIssues(error: z.ZodError): SandboxConfigIssue[] {
  return error.issues.map((issue) => ({
    path: issue.path.map(String).join('.'),
    message:
      issue.code === 'invalid_key' && issue.issues.length > 0
        ? issue.issues.map((inner) => inner.message).join('; ')
        : issue.message,
  }))
}
