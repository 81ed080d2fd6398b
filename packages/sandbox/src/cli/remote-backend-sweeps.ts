import { readFileSync } from 'node:fs'
import {
  type ACIStandbyPoolBackendConfig,
  BUILTIN_BACKEND_PACKAGES,
  builtinBackends,
  type MicroVMBackendConfig,
} from '@cordon/builtin-backends'
import {
  type SandboxBackendConfigBase,
  type SandboxBackendDefinition,
  SandboxBackendUnavailableError,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
} from '@cordon/core'
import { parseBackendConfig } from '@cordon/core/backend'
import { importBackendPackage, type ModuleImporter } from '../load-backend.js'
import { UsageError } from './command-line.js'

/**
 * The backends `cordon gc` reaches besides the Docker Engine, one flag each:
 * a JSON file with the backend config's serialisable fields (validated by
 * the backend's own schema), the bearer token from an environment variable
 * (a function cannot be in a file, and a token kept in a config file
 * outlives its hour), and the backend package's own sweeps: of detached
 * sandboxes past their end time, and of snapshots past their retention
 * where the backend keeps them remotely.
 */

/**
 * One sweep gc runs after the Docker one, reported one line each: a remote
 * backend's, or this machine's port-forward directories (gc-command.ts).
 */
export interface Sweep {
  /** How the output names where it swept: `aci <resource group>`, `microvm <endpoint>`, a directory. */
  readonly where: string
  /** What it removes, plural, and why: `detached guests past their end time`. */
  readonly removes: string
  /** Resolves with the names of what it removed; with `dryRun`, of what it would remove. */
  run(dryRun: boolean): Promise<string[]>
}

/** One sweep a backend package exports: `(config, { signal, dryRun, ... }) => names`. */
interface ExportedSweep {
  readonly name: string
  /** What it removes, plural, and why: `detached groups past their end time`. */
  readonly removes: string
  /** The options it takes besides `dryRun`, from the command line's. */
  options?(flags: RemoteSweepFlags): Record<string, unknown>
}

/** What the command line gives every sweep besides `dryRun`. */
export interface RemoteSweepFlags {
  /** `--snapshot-retention`, when given. */
  readonly snapshotRetentionMs?: number
}

/** What `cordon gc` needs to know of a backend it reaches through a config file. */
interface RemoteGcBackend<Config extends SandboxBackendConfigBase> {
  readonly flag: 'aci' | 'microvm'
  readonly definition: SandboxBackendDefinition<Config>
  readonly packageName: string
  /** The fields that pick this backend, which the file may leave out. */
  readonly selector: Readonly<Record<string, string>>
  /** The config's token function, filled from {@link tokenVariable}. */
  readonly tokenField: string
  readonly tokenVariable: string
  readonly tokenIs: string
  readonly sweeps: readonly ExportedSweep[]
  where(config: Config): string
}

// Validation needs only the definitions (their schemas); the packages are loaded by prepareRemoteSweeps.
const definitions = builtinBackends(() =>
  Promise.reject(new Error('cordon gc loads backend packages itself')),
)

export const ACI_GC: RemoteGcBackend<ACIStandbyPoolBackendConfig> = {
  flag: 'aci',
  definition: definitions.aciStandbyPool,
  packageName: BUILTIN_BACKEND_PACKAGES.aci,
  selector: { tier: 'container', runtime: 'aci-standby-pool' },
  tokenField: 'getArmToken',
  tokenVariable: 'CORDON_ARM_TOKEN',
  tokenIs: 'a bearer token for Azure Resource Manager (az account get-access-token)',
  sweeps: [
    { name: 'removeEndedDetachedAciGroups', removes: 'detached groups past their end time' },
  ],
  where: (config) => `aci ${config.resourceGroup}`,
}

export const MICROVM_GC: RemoteGcBackend<MicroVMBackendConfig> = {
  flag: 'microvm',
  definition: definitions.microVM,
  packageName: BUILTIN_BACKEND_PACKAGES.microvm,
  selector: { tier: 'microvm', service: 'self-hosted' },
  tokenField: 'getToken',
  tokenVariable: 'CORDON_ORCHESTRATOR_TOKEN',
  tokenIs: "the orchestrator control plane's bearer token",
  sweeps: [
    { name: 'removeEndedDetachedMicroVMGuests', removes: 'detached guests past their end time' },
    {
      name: 'removeMicroVMGuestsOfGoneHosts',
      removes: 'guests whose host process on this machine has ended',
    },
    {
      name: 'removeExpiredMicroVMSnapshots',
      removes: 'snapshots past their retention',
      options: ({ snapshotRetentionMs }) =>
        snapshotRetentionMs === undefined ? {} : { retentionMs: snapshotRetentionMs },
    },
  ],
  where: (config) => `microvm ${config.orchestratorEndpoint}`,
}

/**
 * The sweeps one flag asks for, one per file, checked before anything is
 * removed: a file that cannot be read, is not a JSON object, or that the
 * backend's schema refuses, and a missing token, are {@link UsageError}s
 * naming the flag (with the backend's own message, which names the key);
 * a backend package that is not installed is
 * `SandboxBackendNotInstalledError` naming the package.
 */
export async function prepareRemoteSweeps<Config extends SandboxBackendConfigBase>(
  backend: RemoteGcBackend<Config>,
  files: readonly string[],
  flags: RemoteSweepFlags,
  env: NodeJS.ProcessEnv,
  importer?: ModuleImporter,
): Promise<Sweep[]> {
  if (files.length === 0) return []
  const token = env[backend.tokenVariable]
  if (!token)
    throw new UsageError(
      `--${backend.flag} needs ${backend.tokenIs} in the environment variable ${backend.tokenVariable}`,
    )
  const configs = files.map((file) => configFromFile(backend, file, async () => token))
  const module = (await importBackendPackage(
    backend.definition.name,
    backend.packageName,
    importer,
  )) as Record<string, unknown>
  const exported = backend.sweeps.map((sweep) => {
    const run = module[sweep.name]
    if (typeof run !== 'function')
      throw new SandboxBackendUnavailableError(
        backend.definition.name,
        `${backend.packageName} does not export ${sweep.name}(); cordon gc --${backend.flag} needs a version that does`,
      )
    return {
      sweep,
      run: run as (config: Config, options: Record<string, unknown>) => Promise<string[]>,
    }
  })
  return configs.flatMap((config) =>
    exported.map(({ sweep, run }) => ({
      where: backend.where(config),
      removes: sweep.removes,
      run: (dryRun: boolean) => run(config, { ...sweep.options?.(flags), dryRun }),
    })),
  )
}

/** The backend config in `file`, with the token function added, as the backend's schema takes it. */
function configFromFile<Config extends SandboxBackendConfigBase>(
  backend: RemoteGcBackend<Config>,
  file: string,
  token: () => Promise<string>,
): Config {
  const named = `--${backend.flag} ${file}`
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (error) {
    throw new UsageError(`${named}: cannot read it (${(error as NodeJS.ErrnoException).code})`)
  }
  let fields: unknown
  try {
    fields = JSON.parse(text)
  } catch (error) {
    throw new UsageError(`${named}: not JSON (${(error as Error).message})`)
  }
  if (typeof fields !== 'object' || fields === null || Array.isArray(fields))
    throw new UsageError(`${named}: holds no JSON object (the ${backend.definition.name} config)`)
  if (Object.hasOwn(fields, backend.tokenField))
    throw new UsageError(
      `${named}: ${backend.tokenField} has no place in the file; the token comes from ${backend.tokenVariable}`,
    )
  try {
    return parseBackendConfig(backend.definition, {
      ...backend.selector,
      ...fields,
      [backend.tokenField]: token,
    } as unknown as Config)
  } catch (error) {
    if (
      SandboxConfigValidationError.isInstance(error) ||
      SandboxControlRefusedError.isInstance(error)
    )
      throw new UsageError(`${named}: ${error.message}`)
    throw error
  }
}
