import { type SandboxConfigIssue, SandboxConfigValidationError } from '@cordon/core'
import { SECRET_CONFIG_MAP_KEY } from './aci-defaults.js'

/** A volume mounted into the sandbox's container, as the profile declares it. */
export interface ProfileMount {
  readonly mountPath: string
  readonly readOnly: boolean
  readonly source:
    | {
        readonly kind: 'azureFile'
        readonly shareName: string
        readonly storageAccountName: string
      }
    | { readonly kind: 'emptyDir' }
    | { readonly kind: 'other' }
}

/**
 * What a claim inherits from the container group profile and cannot change:
 * the envelope every sandbox of the pool runs in.
 */
export interface ProfileFacts {
  readonly revision: number | undefined
  /** The container that runs the agent; its config map receives the secret. */
  readonly containerName: string
  /** The container's memory limit in MiB. */
  readonly memoryLimitMb: number
  /** `CORDON_MAX_PROCESSES`, which the entrypoint applies; undefined if the profile sets none. */
  readonly maxProcesses: number | undefined
  readonly ipAddressType: string | undefined
  readonly mounts: readonly ProfileMount[]
}

interface ProfileContainer {
  readonly name?: unknown
  readonly properties?: {
    readonly environmentVariables?: ReadonlyArray<{
      name?: unknown
      value?: unknown
      secureValue?: unknown
    }>
    readonly resources?: {
      readonly requests?: { memoryInGB?: unknown }
      readonly limits?: { memoryInGB?: unknown }
    }
    readonly ports?: ReadonlyArray<{ port?: unknown; protocol?: unknown }>
    readonly volumeMounts?: ReadonlyArray<{
      name?: unknown
      mountPath?: unknown
      readOnly?: unknown
    }>
  }
}

/**
 * Reads a `containerGroupProfiles` document. Every way the profile cannot
 * carry a cordon sandbox is reported together in one
 * `SandboxConfigValidationError`: no container (or more than one) runs the
 * entrypoint, the secret file is not the claim's config map, the agent's port
 * is not exposed, or the profile holds an agent secret of its own (which every
 * sandbox of the pool would then share).
 */
export function parseProfileDocument(document: unknown, agentPort: number): ProfileFacts {
  const problems: SandboxConfigIssue[] = []
  const properties = ((document as { properties?: unknown } | undefined)?.properties ?? {}) as {
    revision?: unknown
    containers?: readonly ProfileContainer[]
    volumes?: ReadonlyArray<Record<string, unknown>>
    ipAddress?: { type?: unknown; ports?: ReadonlyArray<{ port?: unknown; protocol?: unknown }> }
  }
  const containers = Array.isArray(properties.containers) ? properties.containers : []
  const agentContainers = containers.filter((container) =>
    environmentOf(container).has('CORDON_ACI_SECRET_FILE'),
  )
  if (agentContainers.length !== 1) {
    problems.push({
      path: 'properties.containers',
      message: `exactly one container must run cordon-aci-entrypoint.sh with CORDON_ACI_SECRET_FILE set; found ${agentContainers.length}`,
    })
  }
  const container: ProfileContainer = agentContainers[0] ?? {}
  const name = typeof container.name === 'string' ? container.name : ''
  const env = environmentOf(container)
  const at = `properties.containers[${name}]`

  const expectedSecretFile = `/mnt/configmap/${name}/${SECRET_CONFIG_MAP_KEY}`
  if (name && env.get('CORDON_ACI_SECRET_FILE') !== expectedSecretFile) {
    problems.push({
      path: `${at}.environmentVariables.CORDON_ACI_SECRET_FILE`,
      message: `must be ${expectedSecretFile}, where ACI mounts the config-map key a claim sets`,
    })
  }
  for (const variable of ['CORDON_AGENT_SECRET', 'CORDON_AGENT_SECRET_FILE']) {
    if (env.has(variable)) {
      problems.push({
        path: `${at}.environmentVariables.${variable}`,
        message:
          'must not be set: every sandbox of the pool would share it; each claim brings its own secret',
      })
    }
  }
  const listen = env.get('CORDON_AGENT_LISTEN')
  if (name && !(listen && new RegExp(`^tcp:.+:${agentPort}$`).test(listen))) {
    problems.push({
      path: `${at}.environmentVariables.CORDON_AGENT_LISTEN`,
      message: `must be tcp:<address>:${agentPort} (the backend's agentPort)`,
    })
  }
  const exposed = (
    ports: ReadonlyArray<{ port?: unknown; protocol?: unknown }> | undefined,
  ): boolean =>
    (ports ?? []).some(
      (port) =>
        port.port === agentPort &&
        (port.protocol === undefined || /^tcp$/i.test(String(port.protocol))),
    )
  if (!exposed(properties.ipAddress?.ports)) {
    problems.push({
      path: 'properties.ipAddress.ports',
      message: `must expose TCP port ${agentPort}, where the agent listens`,
    })
  }

  const resources = container.properties?.resources
  const memoryInGb = resources?.limits?.memoryInGB ?? resources?.requests?.memoryInGB
  if (name && (typeof memoryInGb !== 'number' || memoryInGb <= 0)) {
    problems.push({
      path: `${at}.resources.requests.memoryInGB`,
      message: 'must be a positive number',
    })
  }
  const processesText = env.get('CORDON_MAX_PROCESSES')
  const maxProcesses = processesText === undefined ? undefined : Number(processesText)
  if (maxProcesses !== undefined && !(Number.isInteger(maxProcesses) && maxProcesses > 0)) {
    problems.push({
      path: `${at}.environmentVariables.CORDON_MAX_PROCESSES`,
      message: 'must be a positive integer',
    })
  }

  if (problems.length > 0)
    throw new SandboxConfigValidationError('container group profile', problems)

  const volumes = new Map<string, Record<string, unknown>>()
  for (const volume of properties.volumes ?? [])
    if (typeof volume.name === 'string') volumes.set(volume.name, volume)
  const mounts: ProfileMount[] = (container.properties?.volumeMounts ?? []).map((mount) => {
    const volume = volumes.get(String(mount.name)) ?? {}
    const azureFile = volume.azureFile as
      | { shareName?: unknown; storageAccountName?: unknown }
      | undefined
    return {
      mountPath: String(mount.mountPath),
      readOnly: mount.readOnly === true,
      source: azureFile
        ? {
            kind: 'azureFile',
            shareName: String(azureFile.shareName),
            storageAccountName: String(azureFile.storageAccountName),
          }
        : 'emptyDir' in volume
          ? { kind: 'emptyDir' }
          : { kind: 'other' },
    }
  })
  return {
    revision: typeof properties.revision === 'number' ? properties.revision : undefined,
    containerName: name,
    memoryLimitMb: Math.round((memoryInGb as number) * 1024),
    maxProcesses,
    ipAddressType:
      typeof properties.ipAddress?.type === 'string' ? properties.ipAddress.type : undefined,
    mounts,
  }
}

function environmentOf(container: ProfileContainer): Map<string, string> {
  const env = new Map<string, string>()
  for (const variable of container.properties?.environmentVariables ?? []) {
    if (typeof variable.name !== 'string') continue
    // A secure value is not returned by GET; record that it is set.
    env.set(variable.name, typeof variable.value === 'string' ? variable.value : '')
  }
  return env
}
