import { statSync } from 'node:fs'
import { resolve } from 'node:path'
import type { ContainerBackendConfig, SandboxProviderConfig } from '@cordon/builtin-backends'
import { SandboxConfigValidationError, SandboxControlRefusedError } from '@cordon/core'
import { UsageError, wholeNumberFlag } from './command-line.js'
import { registryAuthForImage } from './docker-cli-credentials.js'
import { parseDurationFlag } from './duration-flag.js'

export const DEFAULT_IMAGE = 'cordon-test/busybox:latest'

const RUNTIMES = ['docker', 'runc', 'runsc'] as const

/**
 * The flags every command that makes one sandbox takes (`run`, `shell`), in
 * `util.parseArgs` form, and the provider config they describe. An argv is
 * split at `--`: flags before it, the sandbox's command after it.
 */
export const SANDBOX_FLAG_OPTIONS = {
  image: { type: 'string', default: process.env.CORDON_IMAGE ?? DEFAULT_IMAGE },
  runtime: { type: 'string', default: 'docker' },
  memory: { type: 'string' },
  outputs: { type: 'string' },
  'ready-timeout': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const

export function splitAtSeparator(argv: readonly string[]): {
  flags: string[]
  command: string[]
} {
  const separator = argv.indexOf('--')
  return {
    flags: [...(separator >= 0 ? argv.slice(0, separator) : argv)],
    command: separator >= 0 ? argv.slice(separator + 1) : [],
  }
}

/** `--runtime` as a runtime name, or a {@link UsageError} listing the names. */
export function runtimeFlag(value: string): (typeof RUNTIMES)[number] {
  const runtime = RUNTIMES.find((name) => name === value)
  if (!runtime) throw new UsageError(`--runtime is one of ${RUNTIMES.join(', ')} (got "${value}")`)
  return runtime
}

/**
 * The provider config the flags describe; a private image the engine lacks
 * is pulled with the Docker CLI's stored login for its registry
 * (docker-cli-credentials.ts). `--ready-timeout` is the create's readiness
 * budget (`readyTimeoutMs`; the image is pulled before it starts, see
 * engine-prepare.ts).
 */
export async function providerConfigFromFlags(values: {
  readonly image: string
  readonly runtime: string
  readonly outputs?: string | undefined
  readonly 'ready-timeout'?: string | undefined
}): Promise<SandboxProviderConfig & { readonly backend: ContainerBackendConfig }> {
  const runtime = runtimeFlag(values.runtime)
  const readyTimeout = values['ready-timeout']
  const readyTimeoutMs =
    readyTimeout === undefined
      ? undefined
      : parseDurationFlag('ready-timeout', readyTimeout, { zero: 'refused', example: '90s' })
  // A relative directory is taken from where cordon runs, as a shell user expects.
  const outputs = values.outputs === undefined ? undefined : outputsDirectory(values.outputs)
  const registryAuth = await registryAuthForImage(values.image)
  return {
    backend: {
      tier: 'container',
      runtime,
      image: values.image,
      ...(registryAuth ? { registryAuth } : {}),
      ...(readyTimeoutMs === undefined ? {} : { readyTimeoutMs }),
    },
    layout: {
      outputs: {
        source: outputs ? { type: 'hostDir', hostPath: outputs } : { type: 'ephemeral' },
      },
    },
  }
}

/**
 * `--outputs` as an absolute path, refused as a {@link UsageError} when it
 * names something here that is not a directory (the engine would mount a
 * file and every command would then fail). A path that does not exist here
 * is the engine's to judge: its host may be another machine, and the
 * backend names `--outputs` if it lacks the directory too.
 */
function outputsDirectory(value: string): string {
  if (value === '') throw new UsageError('--outputs: name a host directory (got "")')
  const path = resolve(value)
  const found = statSync(path, { throwIfNoEntry: false })
  if (found && !found.isDirectory())
    throw new UsageError(
      `--outputs: ${path} is not a directory; name a directory to hold the outputs`,
    )
  return path
}

/** `--memory` as `memoryLimitMb`, if given. */
export function memoryFromFlags(values: { readonly memory?: string | undefined }): {
  memoryLimitMb?: number
} {
  return values.memory === undefined
    ? {}
    : { memoryLimitMb: wholeNumberFlag('memory', values.memory, 'MiB') }
}

/** The flag a control or config path comes from, for errors a person can act on. */
function flagOf(path: string): string | undefined {
  const [first, second] = path.split('.')
  if (first === 'memoryLimitMb') return 'memory'
  if (first === 'maxProcesses') return 'pids'
  if (first === 'env') return 'env'
  if (first === 'backend' && (second === 'image' || second === 'runtime')) return second
  if (first === 'backend' && second === 'readyTimeoutMs') return 'ready-timeout'
  if (first === 'layout' || first === 'outputs') return 'outputs'
  return undefined
}

/**
 * A refusal of a value the flags gave (a memory limit under the backend's
 * minimum, an environment name a sandbox cannot take) as a
 * {@link UsageError} that names the flag; any other error as it is.
 */
export function flagErrorOf(error: unknown, values: Readonly<Record<string, unknown>>): unknown {
  if (SandboxControlRefusedError.isInstance(error)) {
    const flag = flagOf(error.control)
    if (flag) return new UsageError(`--${flag} ${String(values[flag])}: ${error.reason}`)
  }
  if (SandboxConfigValidationError.isInstance(error)) {
    return new UsageError(
      error.issues
        .map((issue) => {
          const flag = flagOf(issue.path)
          return `${flag ? `--${flag}` : issue.path}: ${issue.message}`
        })
        .join('; '),
    )
  }
  return error
}

/** Runs `make` (a provider's synchronous validation), its refusals of flag values as {@link flagErrorOf}. */
export function withFlagErrors<T>(values: Readonly<Record<string, unknown>>, make: () => T): T {
  try {
    return make()
  } catch (error) {
    throw flagErrorOf(error, values)
  }
}
