import { pathToFileURL } from 'node:url'
import type { CordonSandboxProvider, SandboxEvent } from '@cordon/core'
import type { EngineRuntime } from './bench-runtime.js'
import { BENCH_IMAGE, BENCH_LABELS } from './engine.js'

/**
 * `CORDON_BENCH_BACKEND=/path/to/backend-docker/dist/index.js` runs the bench
 * against another build of the Docker backend (a proposed change, before it
 * lands); by default it is the workspace's `@cordon/backend-docker`.
 */
const alternative = process.env.CORDON_BENCH_BACKEND
const backend: typeof import('@cordon/backend-docker') = alternative
  ? await import(pathToFileURL(alternative).href)
  : await import('@cordon/backend-docker')

export const CORDON_BUILD = alternative ?? '@cordon/backend-docker (workspace)'

/**
 * A cordon provider as a host would configure it: the Docker backend, the
 * bench image, an `ephemeral` outputs mount and every default (deny-all,
 * 512 MiB, 32 processes, one CPU). `outputsPath` moves the outputs mount
 * (an agent framework's workspace root, e.g. `/workspace`); `image` replaces
 * the bench image; `runtime` picks runc or gVisor.
 */
export function cordonProvider(
  options: {
    poolSize?: number
    outputsPath?: string
    image?: string
    /** The engine runtime (default: the engine's, runc); `runsc` for gVisor. */
    runtime?: EngineRuntime | undefined
    /** The provider's event hook (the create steps' durations ride on `create.ready`). */
    onEvent?: (event: SandboxEvent) => void
  } = {},
): CordonSandboxProvider {
  return backend.createDockerSandboxProvider({
    backend: {
      tier: 'container',
      image: options.image ?? BENCH_IMAGE,
      labels: BENCH_LABELS,
      ...(options.runtime ? { runtime: options.runtime } : {}),
    },
    layout: {
      outputs: {
        source: { type: 'ephemeral' },
        ...(options.outputsPath ? { containerPath: options.outputsPath } : {}),
      },
    },
    ...(options.poolSize ? { pool: { size: options.poolSize } } : {}),
    ...(options.onEvent ? { onEvent: options.onEvent } : {}),
  })
}
