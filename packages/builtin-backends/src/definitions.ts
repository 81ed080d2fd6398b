import type { ResolvedContainerSandboxLayout } from '@cordon/core'
import {
  defineBackend,
  planLayoutMounts,
  type SandboxBackendFactory,
  type SandboxBackendModule,
  type SandboxEnforcementDeclaration,
} from '@cordon/core/backend'
import {
  type ACIStandbyPoolBackendConfig,
  aciStandbyPoolBackendConfigSchema,
} from './aci-config.js'
import { type ContainerBackendConfig, containerBackendConfigSchema } from './docker-config.js'
import { type MicroVMBackendConfig, microVMBackendConfigSchema } from './microvm-config.js'

/**
 * Imports a backend package by name. The host's provider passes its own (the
 * umbrella's can resolve the packages a host installed, names the one to
 * install when it is missing, and can be replaced by tests and bundlers).
 */
export type BackendPackageImporter = (packageName: string) => Promise<unknown>

/** The package of each built-in backend; a host installs only the one it uses. */
export const BUILTIN_BACKEND_PACKAGES = {
  docker: '@cordon/backend-docker',
  aci: '@cordon/backend-aci',
  microvm: '@cordon/backend-microvm',
} as const

const ALL_USAGE = ['cpuTimeMs', 'memoryBytes', 'memoryPeakBytes', 'processes', 'diskBytes'] as const

const dockerEnforcement = (gvisor: boolean): SandboxEnforcementDeclaration => ({
  isolation: gvisor ? 'user-space-kernel' : 'container',
  environment: 'linux-namespace',
  memoryLimit: true,
  oomReporting: true,
  // The host's OOM killer sees a whole gVisor sandbox as one process.
  survivesOutOfMemory: !gvisor,
  processLimit: true,
  egress: ['deny-all', 'allow-all', 'static', 'resolver'],
  denyAllNetwork: true,
  terminal: true,
  // The engine pauses a container (runc's cgroup freezer, gVisor's own pause).
  pause: true,
  // A detached container's agent outlives its host; another process reaches it again by id.
  reconnect: true,
  // gVisor's inotify sees what the sandbox does, not what the host does to a shared directory.
  externalWatch: !gvisor,
  // Files: the writable tmpfs mounts, captured into a local image (filesystem-snapshot.ts).
  snapshot: true,
  // Processes: the engine's checkpoint API (experimental mode) under gVisor, which
  // checkpoints the whole sandbox itself; runc's needs CRIU, which fails on
  // cordon's hardened containers (backend-docker memory-snapshot.ts).
  memorySnapshot: gvisor,
  measuredUsage: ALL_USAGE,
  // Engine volumes labelled as cordon's, mounted with the agent's storage cap.
  volumes: true,
})

/** Fields of the reference that describe a network path cordon never creates. */
function dockerConfigRefusal(config: ContainerBackendConfig) {
  if (config.hostReachability !== undefined) {
    return {
      control: 'hostReachability',
      reason:
        'cordon reaches every sandbox through the engine API and needs no network path to it; remove hostReachability',
    }
  }
  if (config.network !== undefined && config.network !== 'none') {
    return {
      control: 'network',
      reason: `a sandbox never joins a routable network ("${config.network}"): its only way out is the egress gateway. Remove network (or set "none") and choose an egress policy such as { kind: 'allow-all' } or { kind: 'static', allowedHosts }`,
    }
  }
  return undefined
}

/**
 * Sources a Docker Engine cannot provide: `inImage` would leave the path to
 * the image, where the sandbox's user cannot write and cordon's file API has
 * no mount to give it, and `azureFileShare` is mounted by ACI. Refused when
 * the provider is made, naming the mount's key, rather than at every exec.
 */
function dockerLayoutRefusal(layout: ResolvedContainerSandboxLayout) {
  for (const mount of planLayoutMounts(layout)) {
    const kind = mount.source.type
    if (kind !== 'inImage' && kind !== 'azureFileShare') continue
    const role = mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role
    return {
      control: `layout.${role}.source`,
      reason:
        kind === 'inImage'
          ? 'an inImage source is not mounted by the Docker Engine; use hostDir, ephemeral or volume'
          : 'Azure file shares are mounted by ACI, not by a Docker Engine; use hostDir, ephemeral or volume',
    }
  }
  return undefined
}

/**
 * The built-in definitions, with `importPackage` loading their code. The
 * definitions are the same objects a third-party backend exports: the
 * provider knows no more of these than of any other.
 */
export function builtinBackends(importPackage: BackendPackageImporter) {
  const factoryOf =
    <Config>(packageName: string) =>
    async (): Promise<SandboxBackendFactory<Config>> =>
      ((await importPackage(packageName)) as SandboxBackendModule<Config>).createBackend
  const docker = (runtime: 'docker' | 'runsc') =>
    defineBackend<ContainerBackendConfig>({
      name: `container:${runtime}`,
      tier: 'container',
      // runc is the engine's default runtime, also asked for by name.
      selects: (backend) => {
        const chosen = (backend as { runtime?: unknown }).runtime
        return (
          backend.tier === 'container' &&
          (runtime === 'runsc'
            ? chosen === 'runsc'
            : chosen === undefined || chosen === 'docker' || chosen === 'runc')
        )
      },
      configSchema: containerBackendConfigSchema,
      layout: 'required',
      enforcement: dockerEnforcement(runtime === 'runsc'),
      configRefusal: dockerConfigRefusal,
      layoutRefusal: dockerLayoutRefusal,
      load: factoryOf(BUILTIN_BACKEND_PACKAGES.docker),
    })
  return {
    docker: docker('docker'),
    runsc: docker('runsc'),
    aciStandbyPool: defineBackend<ACIStandbyPoolBackendConfig>({
      name: 'container:aci-standby-pool',
      tier: 'container',
      selects: (backend) =>
        backend.tier === 'container' &&
        (backend as { runtime?: unknown }).runtime === 'aci-standby-pool',
      configSchema: aciStandbyPoolBackendConfigSchema,
      layout: 'required',
      enforcement: {
        // Between the sandbox and the host only: its code shares the agent's
        // uid and can read the agent's secret, so it can answer as the agent
        // (backend-aci README, Limits).
        isolation: 'container',
        environment: 'linux-namespace',
        // A claim cannot change the group's profile: the profile's memory and
        // process limits hold for every sandbox (sandbox.enforced reports
        // them) but a host cannot choose either.
        memoryLimit: false,
        oomReporting: false,
        survivesOutOfMemory: false,
        processLimit: false,
        egress: ['deny-all'],
        // The agent is reached over TCP, so the group keeps an interface.
        denyAllNetwork: false,
        terminal: false,
        // ARM has no operation that freezes a container group's processes.
        pause: false,
        // A detached claim is found again by name through ARM; its agent ends itself at its lifetime.
        reconnect: true,
        // The mounts are remote shares: their changes do not reach the group's inotify.
        externalWatch: false,
        snapshot: false,
        memorySnapshot: false,
        measuredUsage: ALL_USAGE,
        // A group's mounts are Azure file shares its profile names; cordon keeps no volumes there.
        volumes: false,
      },
      egressRefusal: (config) =>
        config.subnetId
          ? undefined
          : 'without a subnetId the group has a public address and reaches the internet directly; deny-all needs a subnet whose network security group denies outbound traffic',
      load: factoryOf(BUILTIN_BACKEND_PACKAGES.aci),
    }),
    microVM: defineBackend<MicroVMBackendConfig>({
      name: 'microvm:self-hosted',
      tier: 'microvm',
      selects: (backend) =>
        backend.tier === 'microvm' && (backend as { service?: unknown }).service === 'self-hosted',
      configSchema: microVMBackendConfigSchema,
      layout: 'none',
      enforcement: {
        isolation: 'virtual-machine',
        environment: 'linux-namespace',
        memoryLimit: true,
        oomReporting: true,
        survivesOutOfMemory: true,
        processLimit: true,
        egress: ['deny-all', 'allow-all', 'static', 'resolver'],
        denyAllNetwork: true,
        // The guest agent cannot allocate a pseudo-terminal.
        terminal: false,
        // The control plane's pause and resume operations (openapi.yaml).
        pause: true,
        // A detached guest is described again by the control plane; the orchestrator ends it at its timeoutMs.
        reconnect: true,
        // A guest's kernel is its own: it does not see what the host does to shared files.
        externalWatch: false,
        // The control plane's snapshots operation; a create names one as its agentSnapshot.
        snapshot: true,
        // Files only: the stand-in this backend is proved against cannot capture a guest's memory.
        memorySnapshot: false,
        measuredUsage: ALL_USAGE,
        // The control plane has no volume operations and a guest takes no layout.
        volumes: false,
      },
      load: factoryOf(BUILTIN_BACKEND_PACKAGES.microvm),
    }),
  }
}
