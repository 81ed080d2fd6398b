import { z } from 'zod'
import { egressPolicySchema } from './egress-policy.js'
import { SandboxConfigValidationError } from './errors.js'
import type { SandboxEventListener } from './events.js'
import { containerSandboxLayoutSchema } from './layout.js'

const fn = <T>(message: string) => z.custom<T>((value) => typeof value === 'function', { message })
const positiveInt = () => z.number().int().positive()
const labelsSchema = z
  .record(
    z
      .string()
      .regex(/^[a-z0-9][a-z0-9._/-]*$/i, 'label keys use letters, digits, ".", "_", "-", "/"'),
    z.string(),
  )
  .readonly()

/** PEM material for a TLS client (engine, control plane, agent relay). */
export const tlsClientSchema = z
  .object({
    ca: z.string().min(1).optional(),
    cert: z.string().min(1),
    key: z.string().min(1),
    servername: z.string().optional(),
  })
  .readonly()
export type TlsClientConfig = z.input<typeof tlsClientSchema>

/** `container` tier on a Docker Engine, with runc (`docker`, the default) or gVisor (`runsc`). */
export const containerBackendConfigSchema = z
  .object({
    tier: z.literal('container'),
    runtime: z.enum(['docker', 'runsc']).optional(),
    /** Image to start per sandbox. It needs only the commands you will run in it. */
    image: z.string().min(1),
    /** Engine unix socket; default `DOCKER_HOST` if set, else `/var/run/docker.sock`. */
    socketPath: z.string().min(1).optional(),
    /** Engine TCP address instead of a socket. */
    host: z.string().min(1).optional(),
    port: z.number().int().min(1).max(65535).optional(),
    tls: tlsClientSchema.optional(),
    /** `uid:gid` the sandbox runs as (default `1000:1000`). Root (`0`) is refused. */
    user: z
      .string()
      .regex(/^\d+(:\d+)?$/, 'user must be numeric "uid" or "uid:gid"')
      .refine((user) => !/^0+(:|$)/.test(user), 'running the sandbox as root is refused')
      .optional(),
    /** Extra labels on every resource this backend creates. `cordon.*` keys are reserved. */
    labels: labelsSchema
      .refine(
        (labels) => Object.keys(labels).every((key) => !key.startsWith('cordon.')),
        'label keys starting with "cordon." are reserved',
      )
      .optional(),
    /** How long `create()` may take to reach exec-ready (default 30 s). */
    readinessTimeoutMs: positiveInt().optional(),
    /** CPU limit in cores (default 1). */
    cpus: z.number().positive().max(1024).optional(),
    /** Size of the writable `/tmp` tmpfs in MiB (default 64). */
    tmpfsSizeMb: positiveInt().optional(),
    /**
     * Image of the egress gateway that `static`, `resolver` and `allow-all`
     * policies need (build one with `buildGatewayImage()` from
     * `@cordon/backend-docker`). Without it those policies are refused.
     */
    gatewayImage: z.string().min(1).optional(),
    /**
     * Fixed name-to-address entries for the gateway's resolver, for internal
     * services a policy names (pair them with the provider's `allowInwardFor`).
     */
    gatewayHosts: z.record(z.string().min(1), z.string().min(1)).readonly().optional(),
    /** Ports the gateway lets sandboxes reach (default 80 and 443). */
    gatewayAllowedPorts: z.array(z.number().int().min(1).max(65535)).readonly().optional(),
    /** Extra CA certificates (PEM) the gateway trusts for upstream HTTPS, e.g. an internal CA. */
    gatewayUpstreamCa: z.string().min(1).optional(),
    /**
     * Engine runtime for gVisor sandboxes behind the gateway. gVisor's own
     * network stack cannot reach the relay that shares the sandbox's network
     * namespace, so these sandboxes use a runsc runtime registered with
     * `--network=host` (inside the sandbox's own, loopback-only namespace).
     * Without it, gVisor sandboxes accept only `deny-all` and refuse the other
     * policies.
     */
    runscProxiedRuntime: z.string().min(1).optional(),
  })
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
export type ContainerBackendConfig = z.input<typeof containerBackendConfigSchema>

/** `container` tier claimed from an Azure Container Instances standby pool. */
export const aciStandbyPoolBackendConfigSchema = z
  .object({
    tier: z.literal('container'),
    runtime: z.literal('aci-standby-pool'),
    subscriptionId: z.string().min(1),
    resourceGroup: z.string().min(1),
    location: z.string().min(1),
    standbyPoolResourceId: z.string().startsWith('/subscriptions/'),
    containerGroupProfileResourceId: z.string().startsWith('/subscriptions/'),
    containerGroupProfileRevision: z.number().int().nonnegative().optional(),
    /** Returns a bearer token for Azure Resource Manager; called before every request. */
    getArmToken: fn<() => Promise<string>>('getArmToken must be a function returning a token'),
    /** Delegated subnet the claimed groups join; required unless allowPublicAddress is set. */
    subnetId: z.string().startsWith('/subscriptions/').optional(),
    /** Opt in to a public IP for claimed groups when no subnet is given. */
    allowPublicAddress: z.boolean().optional(),
    readinessTimeoutMs: positiveInt().optional(),
    agentPort: z.number().int().min(1).max(65535).optional(),
    armApiVersion: z.string().min(1).optional(),
    armEndpoint: z.string().url().optional(),
    containerNamePrefix: z
      .string()
      .regex(/^[a-z0-9-]{1,40}$/)
      .optional(),
  })
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
export type ACIStandbyPoolBackendConfig = z.input<typeof aciStandbyPoolBackendConfigSchema>

export const agentSnapshotRefSchema = z
  .object({ orgId: z.string().min(1), agentId: z.string().min(1), version: z.string().min(1) })
  .readonly()
export type AgentSnapshotRef = z.input<typeof agentSnapshotRefSchema>

/** `microvm` tier against a guest orchestrator's control plane. */
export const microVMBackendConfigSchema = z
  .object({
    tier: z.literal('microvm'),
    service: z.literal('self-hosted'),
    orchestratorEndpoint: z.string().url(),
    /** Returns the control plane's bearer token; called before every request. */
    getToken: fn<() => Promise<string>>('getToken must be a function returning a token'),
    template: z.string().min(1).optional(),
    agentSnapshot: agentSnapshotRefSchema.optional(),
    agentVsockPort: z.number().int().min(1).max(0xffffffff).optional(),
    readinessTimeoutMs: positiveInt().optional(),
    mtls: tlsClientSchema.optional(),
    controlPlaneMtls: tlsClientSchema.optional(),
  })
  .readonly()
export type MicroVMBackendConfig = z.input<typeof microVMBackendConfigSchema>

export type SandboxTier = 'container' | 'microvm'
export type SandboxBackendConfig =
  | ContainerBackendConfig
  | ACIStandbyPoolBackendConfig
  | MicroVMBackendConfig

/** A credential the egress gateway injects upstream; the sandbox never holds `value`. */
export const brokeredCredentialSchema = z
  .object({
    /** Exact host the credential is bound to. */
    host: z.string().min(1),
    /** Request header that carries it, e.g. `authorization`. */
    header: z.string().regex(/^[A-Za-z0-9-]+$/, 'header must be a plain header name'),
    value: z.string().min(1),
    /**
     * If set, the sandbox sends this string and the gateway swaps it for `value`
     * on requests to `host` only; a request carrying it anywhere else is refused.
     * Without it, the gateway adds the header to every request to `host`.
     */
    placeholder: z.string().min(8).optional(),
  })
  .readonly()
export type BrokeredCredential = z.input<typeof brokeredCredentialSchema>

const providerBaseShape = {
  defaultEgress: egressPolicySchema.optional(),
  /** Default lifetime of a sandbox in ms; it is destroyed when this runs out. */
  defaultTimeoutMs: positiveInt().optional(),
  defaultMemoryLimitMb: positiveInt().optional(),
  defaultMaxProcesses: positiveInt().optional(),
  /** Keep this many exec-ready sandboxes started; `create()` claims one. */
  pool: z
    .object({ size: z.number().int().min(0).max(64) })
    .readonly()
    .optional(),
  /** Structured lifecycle, exec and egress events. Must not throw. */
  onEvent: fn<SandboxEventListener>('onEvent must be a function').optional(),
  /** Credentials the egress gateway injects; never visible inside the sandbox. */
  brokeredCredentials: z.array(brokeredCredentialSchema).readonly().optional(),
  /** Host names whose private or loopback addresses the gateway may dial. */
  allowInwardFor: z.array(z.string().min(1)).readonly().optional(),
}

/** Provider config for the container tier: a layout is required. */
export const containerProviderConfigSchema = z
  .object({
    ...providerBaseShape,
    backend: z.union([containerBackendConfigSchema, aciStandbyPoolBackendConfigSchema]),
    layout: containerSandboxLayoutSchema,
  })
  .readonly()

export const microVMProviderConfigSchema = z
  .object({
    ...providerBaseShape,
    backend: microVMBackendConfigSchema,
    layout: z.undefined().optional(),
  })
  .readonly()

type ProviderBase = z.input<z.ZodObject<typeof providerBaseShape>>

export type SandboxProviderConfig =
  | (ProviderBase & {
      readonly backend: ContainerBackendConfig | ACIStandbyPoolBackendConfig
      readonly layout: z.input<typeof containerSandboxLayoutSchema>
    })
  | (ProviderBase & { readonly backend: MicroVMBackendConfig; readonly layout?: undefined })

/** Per-sandbox settings for `provider.create()`; each falls back to the provider's default. */
export const sandboxCreateConfigSchema = z
  .object({
    signal: z
      .custom<AbortSignal>((value) => value instanceof AbortSignal, 'signal must be an AbortSignal')
      .optional(),
    env: z
      .record(
        z
          .string()
          .regex(
            /^[A-Za-z_][A-Za-z0-9_]*$/,
            'environment variable names are letters, digits and "_"',
          ),
        z.string(),
      )
      .readonly()
      .optional(),
    timeoutMs: positiveInt().optional(),
    memoryLimitMb: positiveInt().optional(),
    maxProcesses: positiveInt().optional(),
    workingDirectory: z.string().startsWith('/').optional(),
    egress: egressPolicySchema.optional(),
  })
  .readonly()
export type SandboxCreateConfig = z.input<typeof sandboxCreateConfigSchema>

/**
 * Parses `input` with `schema`; on failure throws one
 * {@link SandboxConfigValidationError} listing every problem.
 */
export function parseConfig<S extends z.ZodType>(
  schema: S,
  input: unknown,
  subject: string,
): z.output<S> {
  const result = schema.safeParse(input)
  if (result.success) return result.data
  throw new SandboxConfigValidationError(
    subject,
    result.error.issues.map((issue) => ({
      path: issue.path.map(String).join('.'),
      message: issue.message,
    })),
  )
}
