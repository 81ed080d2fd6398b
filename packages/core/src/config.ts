import type { Buffer } from 'node:buffer'
import { z } from 'zod'
import type { SandboxBackendConfigBase } from './backend-definition.js'
import { type EgressPolicy, egressPolicySchema } from './egress-policy.js'
import { type SandboxConfigIssue, SandboxConfigValidationError } from './errors.js'
import type { SandboxEventListener } from './events.js'
import type { ContainerSandboxLayout } from './layout.js'
import { SNAPSHOT_ID_PATTERN } from './sandbox-id.js'

/** Client certificate material for TLS (engine, control plane, agent relay): PEM text or bytes. */
export interface TlsClientMaterial {
  /** CA that signs the server's certificate; default: Node's bundled roots. */
  readonly ca?: string | Buffer
  readonly cert: string | Buffer
  readonly key: string | Buffer
  readonly servername?: string
}

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
  /**
   * Where the provider keeps the credential of each sandbox it creates
   * `detached`: a directory (made mode 0700) holding one file per sandbox
   * (mode 0600), removed when the sandbox is destroyed, so that
   * `provider.connect(id)` works from another process of the same user.
   * Default: `$XDG_STATE_HOME/cordon/credentials`, else
   * `~/.local/state/cordon/credentials`. `false` keeps nothing on disk: the
   * host stores `sandbox.credential` itself and passes it to `connect`.
   */
  readonly credentialStore?: string | false
}

/** Per-sandbox settings for `provider.create()`; each falls back to the provider's default. */
/**
 * A provider config for the backend whose config is `Backend`: the fields
 * every provider takes, the backend's own config, and the container layout
 * where that backend takes one (its definition says whether it must).
 */
export interface SandboxProviderConfigFor<Backend extends SandboxBackendConfigBase>
  extends SandboxProviderConfigBase {
  readonly backend: Backend
  readonly layout?: ContainerSandboxLayout | undefined
}

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
  /**
   * Start from this snapshot (`sandbox.snapshot()`'s id) instead of the
   * image alone: its files, and its processes if it holds them. The limits
   * and egress policy default to the snapshot's sandbox's, before the
   * provider's defaults. Refused naming `snapshot` by a backend that takes
   * no snapshots; an unknown id is `SandboxSnapshotNotFoundError`.
   */
  readonly snapshot?: string
  /**
   * The sandbox does not end with this host process: it runs until its
   * lifetime (this call's `lifetimeMs`, else the provider's
   * `defaultLifetimeMs`; one is required) ends it on the engine's side, or
   * until a host destroys it. `provider.connect(id)` reaches it from another
   * process holding its credential (`sandbox.credential`, also kept in the
   * provider's `credentialStore`). A backend that cannot refuses it with
   * `SandboxControlRefusedError` naming `detached`.
   */
  readonly detached?: boolean
}

/** Options of `provider.connect(id, options)`. */
export interface SandboxConnectOptions {
  /**
   * The sandbox's credential (`sandbox.credential` of the detached sandbox);
   * default: the one the provider's `credentialStore` holds for `id`.
   */
  readonly credential?: string
  readonly signal?: AbortSignal
  /** Destroy the sandbox once it has been idle this many ms through this connection (default: the provider's `defaultIdleTimeoutMs`). */
  readonly idleTimeoutMs?: number
}

/** A config field that must be a function; `message` says what it is for. */
export const functionSchema = <T>(message: string) =>
  z.custom<T>((value) => typeof value === 'function', { message })
const fn = functionSchema
/** A duration in ms that Node's timers can hold. */
export const durationMsSchema = () => z.number().int().positive().max(2_147_483_647)
const durationMs = durationMsSchema
const positiveInt = () => z.number().int().positive()
/**
 * The most processes a sandbox may be given: the kernel's PID_MAX_LIMIT on
 * 64-bit (2^22). No host runs more, and the pids cgroup refuses a larger
 * `pids.max` with EINVAL, which reached the host as a raw engine error.
 */
const MAX_PROCESSES_LIMIT = 4_194_304
/**
 * The largest memory limit, in MiB: 64 TiB, the most physical memory x86-64
 * with 4-level page tables addresses. A larger one is a typo, not a budget
 * (1e12 MiB was taken), and its byte count leaves the integers a number
 * holds exactly soon after (2^53 bytes is 8 PiB).
 */
const MAX_MEMORY_LIMIT_MB = 64 * 1024 * 1024
const processCount = () =>
  positiveInt().max(MAX_PROCESSES_LIMIT, {
    error: `at most ${MAX_PROCESSES_LIMIT} (the kernel's PID_MAX_LIMIT)`,
  })
const memoryMb = () =>
  positiveInt().max(MAX_MEMORY_LIMIT_MB, {
    error: `at most ${MAX_MEMORY_LIMIT_MB} MiB (64 TiB)`,
  })
/** A TCP port, 1 to 65535. */
export const tcpPortSchema = () => z.number().int().min(1).max(65535)
const pem = () =>
  z.union([
    z.string().min(1),
    z.custom<Buffer>(
      (value) => value instanceof Uint8Array && value.byteLength > 0,
      'expected PEM text or a non-empty Buffer',
    ),
  ])

export const tlsClientSchema: z.ZodType<TlsClientMaterial> = z
  .object({
    ca: pem().optional(),
    cert: pem(),
    key: pem(),
    servername: z.string().optional(),
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

/** The provider fields every backend takes (the backend and its layout aside). */
export const providerBaseShape = {
  defaultEgress: egressPolicySchema.optional(),
  defaultTimeoutMs: durationMs().optional(),
  defaultMemoryLimitMb: memoryMb().optional(),
  defaultMaxProcesses: processCount().optional(),
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
  credentialStore: z
    .union([
      z
        .string()
        .min(1, 'must not be empty')
        .refine((value) => value.startsWith('/'), 'must be an absolute path'),
      z.literal(false),
    ])
    .optional(),
}

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
    memoryLimitMb: memoryMb().optional(),
    maxProcesses: processCount().optional(),
    signal: z
      .custom<AbortSignal>((value) => value instanceof AbortSignal, 'signal must be an AbortSignal')
      .optional(),
    egress: egressPolicySchema.optional(),
    lifetimeMs: durationMs().optional(),
    idleTimeoutMs: durationMs().optional(),
    snapshot: z
      .string()
      .regex(SNAPSHOT_ID_PATTERN, 'must be a snapshot id (snp_ and 26 base-32 characters)')
      .optional(),
    detached: z.boolean().optional(),
  })
  .strict()
  .readonly()

export const sandboxConnectOptionsSchema: z.ZodType<SandboxConnectOptions> = z
  .object({
    credential: z.string().min(1, 'must not be empty').optional(),
    signal: z
      .custom<AbortSignal>((value) => value instanceof AbortSignal, 'signal must be an AbortSignal')
      .optional(),
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
