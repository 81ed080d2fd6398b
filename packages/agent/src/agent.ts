/**
 * The agent program. Bundled into dist/cordon-agent.mjs, the one file a guest
 * image needs (plus a `node` binary). Configuration comes from `CORDON_AGENT_*`
 * environment variables (see agent-config.ts and the README).
 *
 * Signals: SIGHUP is the resume signal (re-seed, re-read the secret, listen
 * again); SIGTERM and SIGINT stop the agent.
 */
import { type AgentConfig, AgentConfigError, readAgentConfig } from './agent-config.js'
import { AGENT_VERSION } from './agent-connection.js'
import { type RunningAgent, startAgent } from './agent-server.js'
import { codeCacheUse, startedFromSnapshot } from './code-cache-use.js'
import { type CapabilityName, missingCapabilities } from './effective-capabilities.js'
import { AGENT_EXIT_CODES } from './protocol/exit-codes.js'
import { runRelay } from './relay.js'
import { runSocketPipe } from './socket-pipe.js'
import { deferStartupBackgroundWork } from './startup-v8-flags.js'
import { findExcess, type StorageExcess, watchStorage } from './storage-watch.js'
import { handTreesTo } from './tree-owner.js'
import { actAsItself } from './user-identity.js'
import { killProcessesOf } from './user-processes-kill.js'

async function main(): Promise<void> {
  if (process.argv.includes('--version')) {
    process.stdout.write(`${AGENT_VERSION}\n`)
    return
  }
  // Whether this start compiled the program from its code cache (code-cache-loader.ts):
  // how an operator checks that a guest's cache fits its Node.
  if (process.argv.includes('--code-cache')) {
    process.stdout.write(`${codeCacheUse() ?? 'no loader'}\n`)
    return
  }
  // Whether Node started from a startup snapshot of the loader (makeAgentSnapshot).
  if (process.argv.includes('--startup-snapshot')) {
    process.stdout.write(`${startedFromSnapshot() ? 'yes' : 'no'}\n`)
    return
  }
  const relay = process.argv.indexOf('--relay')
  if (relay !== -1 && process.argv[relay + 1]) {
    runRelay(process.argv[relay + 1]!)
    return
  }
  const pipe = process.argv.indexOf('--pipe')
  if (pipe !== -1 && process.argv[pipe + 1]) {
    runSocketPipe(process.argv[pipe + 1]!)
    return
  }
  deferStartupBackgroundWork()
  const config = readAgentConfig(process.env)
  // libuv reads it when its pool starts, on the first file or DNS work: none has run yet.
  // Commands never inherit it: each carries its own whole environment.
  if (config.poolThreads !== undefined) process.env.UV_THREADPOOL_SIZE = String(config.poolThreads)
  const runAs = config.runAs
  // Caps are measured as root (every entry whatever its modes, every
  // process's descriptors: tree-size.ts, held-files.ts), and outputs sealed
  // and handed over as root (output-seal.ts). Without the rights to, either
  // would be done only in part: refused rather than done so.
  const needed = new Set<CapabilityName>([
    ...(config.storageCaps.length > 0 ? (['DAC_OVERRIDE', 'SYS_PTRACE'] as const) : []),
    ...(config.sealRoots.length > 0 ? (['DAC_OVERRIDE', 'FOWNER', 'CHOWN'] as const) : []),
    ...(config.ownRoots.length > 0 ? (['DAC_OVERRIDE', 'CHOWN'] as const) : []),
  ])
  const missing = missingCapabilities([...needed])
  if (missing.length > 0) {
    process.stderr.write(
      `the storage caps, the output seal and the volumes' ownership need the agent to hold ${missing.map((name) => `CAP_${name}`).join(', ')}\n`,
    )
    process.exit(AGENT_EXIT_CODES.cannotStart)
  }
  if (runAs && config.storageCaps.length > 0) {
    // A directory already past its cap (left so by an earlier sandbox, or by
    // the host) is refused before the host is told the sandbox is ready.
    const excess = await findExcess(config.storageCaps, actAsItself)
    if (excess) {
      process.stderr.write(`${describeExcess(excess)} before the sandbox started\n`)
      process.exit(AGENT_EXIT_CODES.storageLimit)
    }
  }
  if (runAs && config.ownRoots.length > 0) {
    // Before anything of the sandbox runs: no process of it can race the walk.
    const handed = await handTreesTo(config.ownRoots, runAs)
    config.log('info', 'volumes handed to the sandbox user', { entries: handed })
  }
  const starting = startAgent(config)
  // The handlers come first: a supervisor may signal the agent as soon as it
  // says it listens, which it says before startAgent has returned; a signal
  // without a handler would end it (Node's default for each of these).
  let resuming = Promise.resolve()
  process.on('SIGHUP', () => {
    resuming = resuming
      .then(async () => (await starting).resume())
      .catch((error: unknown) => {
        config.log('error', 'resume failed', { error: (error as Error).message })
        process.exitCode = AGENT_EXIT_CODES.resumeFailed
        void starting
          .then((agent) => agent.close())
          .finally(() => process.exit(AGENT_EXIT_CODES.resumeFailed))
      })
  })
  const stop = (): void => {
    void starting
      .then((agent) => agent.close())
      .finally(() => process.exit(AGENT_EXIT_CODES.stopped))
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  const agent = await starting
  if (runAs && config.storageCaps.length > 0) watchCaps(config, runAs, agent)
  const endAfter = (lifetimeMs: number | undefined) =>
    lifetimeMs === undefined
      ? undefined
      : // In running time: a pause of the sandbox does not count (deadline-clock.ts).
        agent.clock.after(lifetimeMs, () => {
          config.log('info', 'lifetime reached; stopping', { lifetimeMs })
          void agent.close().finally(() => process.exit(AGENT_EXIT_CODES.stopped))
        })
  let lifetime = endAfter(config.lifetimeMs)
  // A sandbox restored from a memory snapshot has a lifetime of its own, counted from its restore.
  agent.onChannelResumed = (line) => {
    if (line.lifetimeMs === undefined) return
    lifetime?.cancel()
    lifetime = endAfter(line.lifetimeMs ?? undefined)
  }
}

function watchCaps(config: AgentConfig, runAs: { uid: number; gid: number }, agent: RunningAgent) {
  watchStorage({
    caps: config.storageCaps,
    actAs: actAsItself,
    uid: runAs.uid,
    intervalMs: config.storageCheckMs,
    onExceeded: (excess) => {
      // Stop the writers first; closing then seals the outputs as every end does.
      const kill = killProcessesOf(runAs, config.launcher)
      config.log('error', `${describeExcess(excess)}; ending the sandbox`, { ...kill })
      // Set before closing: the channel's end also exits, with this status.
      process.exitCode = AGENT_EXIT_CODES.storageLimit
      void agent.close().finally(() => process.exit())
    },
  })
}

function describeExcess(excess: StorageExcess): string {
  return `${excess.root} takes ${excess.usedBytes} bytes of disk, over its cap of ${excess.capBytes}`
}

main().catch((error: unknown) => {
  const message =
    error instanceof AgentConfigError
      ? error.message
      : `agent failed to start: ${(error as Error)?.stack ?? error}`
  process.stderr.write(`${message}\n`)
  process.exit(AGENT_EXIT_CODES.cannotStart)
})
