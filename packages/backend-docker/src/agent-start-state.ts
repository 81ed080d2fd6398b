import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeAgentCodeCache, makeAgentSnapshot } from '@cordon/agent/sandbox'
import type { HostFile } from './host-files-archive.js'

/** The agent's startup snapshot in the runtime volume (the agent's snapshot-warm-up.ts says why). */
export const AGENT_SNAPSHOT_FILE = 'agent.blob'
/** The agent program's V8 code cache, beside the program (the agent's code-cache-loader.ts says why). */
export const AGENT_CODE_CACHE_FILE = 'agent.cjs.cache'

/**
 * Whether a runtime's sandboxes start their agent from the snapshot: under
 * gVisor only. There it spares most of the agent's wait (bench scenario 1
 * under gVisor, three alternating runs each: "waiting for the agent" 229-237
 * against 138-163 ms); under runc compiling is cheap and the snapshot's
 * gain was within the noise (0.92x-0.99x against 0.90x-0.93x), while Node
 * started from it holds more memory (bench scenario 9, an idle sandbox's
 * charge: 7.7 against 12.8 MiB). Every runtime's agent loads its program
 * from the code cache.
 */
export function agentStartsFromSnapshot(runtime: string | undefined): boolean {
  return runtime === 'runsc'
}

/** Who makes them (a seam for tests: the real ones run this host's Node). */
export interface StartStateMakers {
  readonly snapshot: typeof makeAgentSnapshot
  readonly codeCache: typeof makeAgentCodeCache
}

const MAKERS: StartStateMakers = { snapshot: makeAgentSnapshot, codeCache: makeAgentCodeCache }

/**
 * Fills with `files` and what the agent starts from, both made here by
 * running the runtime's Node (this host's, `bin/node` among `files`): a
 * startup snapshot of the agent's loader (`agent.blob`), which holds Node's
 * own modules compiled, and the program's code cache (`agent.cjs.cache`),
 * which holds the agent's, made by running the agent as a container's entry
 * runs it (from the snapshot, through the launcher). Neither is part of the
 * volume's name: they follow from what is (that Node and that agent).
 *
 * Where one cannot be made the volume is filled without it: without the
 * snapshot the entry starts the loader as a script, without the cache the
 * program is compiled from source; slower to start, the same program.
 * Resolves whether the snapshot is in the volume, which decides the entry.
 */
export async function withStartState(
  files: readonly HostFile[],
  fill: (files: HostFile[]) => Promise<void>,
  makers: StartStateMakers = MAKERS,
): Promise<{ snapshot: boolean }> {
  const dir = mkdtempSync(join(tmpdir(), 'cordon-runtime-'))
  try {
    const nodePath = files.find((file) => file.name === 'bin/node')!.source
    const launcher = files.find((file) => file.name === 'bin/cordon-launcher')?.source
    const snapshotOut = join(dir, AGENT_SNAPSHOT_FILE)
    const snapshot = await makers.snapshot({ out: snapshotOut, nodePath }).then(
      () => true,
      () => false,
    )
    const cacheOut = join(dir, AGENT_CODE_CACHE_FILE)
    const attempt = (withLauncher: boolean): Promise<boolean> =>
      makers
        .codeCache({
          out: cacheOut,
          nodePath,
          ...(withLauncher ? { launcher } : {}),
          ...(snapshot ? { snapshot: snapshotOut } : {}),
        })
        .then(
          () => true,
          () => false,
        )
    // Through the launcher as a container's entry starts it; where the launcher
    // cannot run on this host (a temporary directory mounted noexec, say),
    // without it: the cache then lacks only the launcher's side of the agent.
    const cached = (await attempt(true)) || (launcher !== undefined && (await attempt(false)))
    await fill([
      ...files,
      ...(snapshot ? [{ name: AGENT_SNAPSHOT_FILE, source: snapshotOut, mode: 0o644 }] : []),
      ...(cached ? [{ name: AGENT_CODE_CACHE_FILE, source: cacheOut, mode: 0o644 }] : []),
    ])
    return { snapshot }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
