/**
 * The container group profile the stand-in's pool is built from, and the ARM
 * document it serves for it. It is the profile the backend-aci README asks an
 * operator to create: one container running `cordon-aci-entrypoint.sh`, which
 * waits for the claim's config-map secret and then runs the agent on TCP.
 */

/** Where the image (here: a read-only bind mount) holds the agent and the entrypoint. */
export const AGENT_PROGRAM_IN_IMAGE = '/opt/cordon/cordon-agent.mjs'
export const ENTRYPOINT_IN_IMAGE = '/opt/cordon/cordon-aci-entrypoint.sh'
/** The config-map key a claim puts the agent secret under. */
export const SECRET_CONFIG_MAP_KEY = 'cordon-agent-secret'

export interface StandinProfileSpec {
  readonly name: string
  readonly revision: number
  /** The one container of the group; its config map is mounted at `/mnt/configmap/<containerName>`. */
  readonly containerName: string
  readonly image: string
  readonly memoryMb: number
  readonly cpus: number
  /** What the entrypoint applies with `ulimit -u` (declared as `CORDON_MAX_PROCESSES`). */
  readonly maxProcesses: number
  readonly agentPort: number
  /** Writable, empty per group (`emptyDir` volumes); the first is the agent's default directory. */
  readonly emptyDirs: readonly string[]
  readonly ipAddressType: 'Private' | 'Public'
}

export const DEFAULT_PROFILE: StandinProfileSpec = {
  name: 'cordon-sandbox',
  revision: 1,
  containerName: 'sandbox',
  image: 'cordon-test/node:latest',
  memoryMb: 256,
  cpus: 1,
  maxProcesses: 128,
  agentPort: 2024,
  emptyDirs: ['/mnt/user-data/outputs'],
  ipAddressType: 'Private',
}

export function secretFileInContainer(profile: StandinProfileSpec): string {
  return `/mnt/configmap/${profile.containerName}/${SECRET_CONFIG_MAP_KEY}`
}

/** The container's environment, as the profile declares it. */
export function profileEnvironment(profile: StandinProfileSpec): Record<string, string> {
  return {
    CORDON_AGENT_LISTEN: `tcp:0.0.0.0:${profile.agentPort}`,
    CORDON_AGENT_WRITE_ROOTS: profile.emptyDirs.join(':'),
    CORDON_ACI_SECRET_FILE: secretFileInContainer(profile),
    CORDON_MAX_PROCESSES: String(profile.maxProcesses),
    // Fewer threads leave more of the process limit to the commands.
    UV_THREADPOOL_SIZE: '2',
  }
}

/**
 * The group properties the profile defines, which every group claimed from
 * the pool inherits (ARM returns them in the group's own document too).
 */
export function profileGroupProperties(profile: StandinProfileSpec): {
  readonly containers: ReadonlyArray<{
    readonly name: string
    readonly properties: Record<string, unknown>
  }>
  readonly ipAddress: {
    readonly type: string
    readonly ports: ReadonlyArray<Record<string, unknown>>
  }
  readonly [property: string]: unknown
} {
  const volumeName = (index: number): string => `scratch${index}`
  const ports = [{ port: profile.agentPort, protocol: 'TCP' }]
  return {
    sku: 'Standard',
    osType: 'Linux',
    restartPolicy: 'Never',
    containers: [
      {
        name: profile.containerName,
        properties: {
          image: profile.image,
          command: ['/bin/sh', ENTRYPOINT_IN_IMAGE],
          ports,
          environmentVariables: Object.entries(profileEnvironment(profile)).map(
            ([name, value]) => ({ name, value }),
          ),
          resources: { requests: { cpu: profile.cpus, memoryInGB: profile.memoryMb / 1024 } },
          volumeMounts: profile.emptyDirs.map((mountPath, index) => ({
            name: volumeName(index),
            mountPath,
            readOnly: false,
          })),
        },
      },
    ],
    volumes: profile.emptyDirs.map((_, index) => ({ name: volumeName(index), emptyDir: {} })),
    ipAddress: { type: profile.ipAddressType, ports },
  }
}

/** `Microsoft.ContainerInstance/containerGroupProfiles` document, as ARM's GET returns it. */
export function profileDocument(
  profile: StandinProfileSpec,
  ids: { readonly profileId: string; readonly location: string },
): Record<string, unknown> {
  return {
    id: ids.profileId,
    name: profile.name,
    type: 'Microsoft.ContainerInstance/containerGroupProfiles',
    location: ids.location,
    properties: { revision: profile.revision, ...profileGroupProperties(profile) },
  }
}
