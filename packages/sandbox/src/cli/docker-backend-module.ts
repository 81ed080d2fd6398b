import { BUILTIN_BACKEND_PACKAGES, type RegistryCredential } from '@cordon/builtin-backends'
import type { SandboxEvent } from '@cordon/core'
import type { UnjudgedOwnerReason } from '@cordon/core/backend'
import { importBackendPackage } from '../load-backend.js'

/** What the Docker sweep removed and kept, as `collectGarbage` reports it. */
export interface GarbageReport {
  containers: string[]
  images: string[]
  /** Memory snapshots' checkpoints removed (by snapshot id). */
  checkpoints?: string[]
  /** Copies containerd left of those checkpoints, removed (by path; absent from an older backend). */
  checkpointCopies?: string[]
  volumes: string[]
  networks: string[]
  kept: number
  /** Of `kept`, the snapshots kept only by their retention (absent from an older backend). */
  snapshotsWithinRetention?: number
  unjudged: ReadonlyArray<{ kind: string; id: string; reason: UnjudgedOwnerReason }>
  failed: Array<{ id: string; reason: string }>
  namedVolumes: ReadonlyArray<{
    name: string
    sizeMb: number
    lastUsedAt: number
    usedBy: readonly unknown[]
    removed: boolean
  }>
  detachedKept: readonly string[]
}

/** The subset of @cordon/backend-docker the command line uses beyond the provider. */
export interface DockerBackendModule {
  collectGarbage(options: {
    docker: unknown
    engine?: string
    dryRun?: boolean
    snapshotRetentionMs?: number
    volumeRetentionMs?: number
    labels?: Record<string, string>
    signal?: AbortSignal
  }): Promise<GarbageReport>
  connectEngine(config: Record<string, never>): {
    docker: unknown
    endpoint: string
    description: string
  }
  prepareAgentRuntime(
    config: { image: string; registryAuth?: Record<string, RegistryCredential> },
    options: { signal?: AbortSignal; onEvent?: (event: SandboxEvent) => void },
  ): Promise<{ volume: string }>
  buildImage(
    config: Record<string, never>,
    options: {
      context: string
      tag: string
      dockerfile?: string
      buildArgs?: Record<string, string>
      signal?: AbortSignal
      onProgress?: (progress: { step: number | undefined; line: string }) => void
    },
  ): Promise<{ tag: string; id: string }>
}

/** Loads the Docker backend for commands that are Docker-specific (`cordon gc`, `prepare`, `build`). */
export async function loadDockerBackend(): Promise<DockerBackendModule> {
  return (await importBackendPackage(
    'container:docker',
    BUILTIN_BACKEND_PACKAGES.docker,
  )) as DockerBackendModule
}
