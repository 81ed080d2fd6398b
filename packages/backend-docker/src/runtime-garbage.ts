import { LABEL } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { currentRuntimeVolume, RUNTIME_VOLUME_NAME, STALE_FILL_LOCK_MS } from './agent-runtime.js'
import { KEEPER_LABEL } from './huge-page-node.js'

/**
 * A runtime volume nothing has mounted is kept this long after it was made:
 * a host of another version may have just filled it and be about to create
 * its first container on it.
 */
export const UNUSED_RUNTIME_GRACE_MS = 10 * 60_000

export interface RuntimeGarbage {
  /** Filler lock containers left by a filler that died, and the keepers of runtimes that go. */
  readonly containers: string[]
  /** Runtime volumes, completion marks and huge-page Node volumes to remove, each mark before its volume. */
  readonly volumes: string[]
  readonly kept: number
}

/**
 * Which agent runtimes (agent-runtime.ts) can go. They have no owner: every
 * host with the same Node and agent shares one, so they are judged by use.
 * A runtime is removed when it is not this host's current one, no container
 * (of any state) but its own keeper mounts it, and it is older than
 * UNUSED_RUNTIME_GRACE_MS; its keeper (huge-page-node.ts) goes with it.
 * Each build of cordon or Node makes a new one of about 100 MiB, so without
 * this they pile up. A host that still holds a removed runtime fills it again
 * on its next create (docker-backend.ts `runtimeWentAway`).
 */
export async function findRuntimeGarbage(docker: Docker, now: number): Promise<RuntimeGarbage> {
  const current = currentRuntimeVolume()
  const containers = await docker.listContainers({ all: true })
  const isKeeper = (info: Docker.ContainerInfo) => info.Labels?.[KEEPER_LABEL] === 'keeper'
  const staleLocks = containers
    .filter(
      (info) =>
        info.Labels?.[LABEL.role] === 'runtime' &&
        // Both locks are named so: a filler's, and a keeper's before it is whole.
        info.Names?.some((name) => name.endsWith('-filling')) &&
        now - info.Created * 1000 > STALE_FILL_LOCK_MS,
    )
    .map((info) => info.Id)
  // A runtime's own keeper does not count as a use of it.
  const mounted = new Set<string>()
  for (const info of containers) {
    if (staleLocks.includes(info.Id) || isKeeper(info)) continue
    for (const mount of info.Mounts ?? []) if (mount.Name) mounted.add(mount.Name)
  }
  // By name as well as label: a volume the engine made on demand, after one
  // was removed under a running host, carries no labels.
  const runtimes = ((await docker.listVolumes()).Volumes ?? []).filter((volume) =>
    RUNTIME_VOLUME_NAME.test(volume.Name),
  )
  const createdAt = new Map(
    runtimes.map((volume) => [
      volume.Name,
      Date.parse((volume as { CreatedAt?: string }).CreatedAt ?? ''),
    ]),
  )
  const volumes: string[] = []
  let kept = 0
  const removed = [...staleLocks]
  for (const base of new Set(
    runtimes.map((volume) => volume.Name.replace(/-(complete|node)$/, '')),
  )) {
    const parts = [`${base}-complete`, `${base}-node`, base].filter((name) => createdAt.has(name))
    const made = Math.max(...parts.map((name) => createdAt.get(name)!))
    const removable =
      base !== current &&
      !parts.some((name) => mounted.has(name)) &&
      // A date the engine did not give counts as old.
      !(now - made < UNUSED_RUNTIME_GRACE_MS)
    if (removable) {
      volumes.push(...parts)
      // Its keeper first: it holds the huge-page volume.
      const hash = base.slice('cordon-runtime-'.length)
      for (const info of containers)
        if (
          isKeeper(info) &&
          info.Labels?.['cordon.runtime'] === hash &&
          !removed.includes(info.Id)
        )
          removed.push(info.Id)
    } else kept += parts.length
  }
  return { containers: removed, volumes, kept }
}
