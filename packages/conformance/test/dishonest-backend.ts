import {
  type CordonBackendSandbox,
  type CordonSandboxProvider,
  type SandboxBackendOptions,
  type SandboxBackendUsage,
  SandboxControlRefusedError,
  type SandboxCreateConfig,
  SandboxDestroyedError,
  type SandboxEnforcementDeclaration,
  type SandboxEnvironment,
  type SandboxExecResult,
} from '@cordon/core'
import {
  type CordonSandboxBackend,
  composeProvider,
  defineBackend,
  newSandboxId,
} from '@cordon/core/backend'
import { z } from 'zod'

/**
 * The ways the test backend lies about what it enforces, each one a way the
 * provider cannot catch by itself (it reads only the declaration), so only
 * the suite can:
 *
 * - `memory-limit-ignored`: declares `memoryLimit: true` and ignores the limit.
 * - `memory-limit-accepted`: declares `memoryLimit: false`, yet its provider
 *   (hand-made, not `composeProvider`) accepts a limit and drops it.
 * - `egress-accepted`: declares only `allow-all`, yet accepts any policy.
 * - `usage-missing`: declares `memoryBytes` measured and never reports it.
 * - `wrong-environment`: declares `basic`, its sandboxes say `linux-namespace`.
 * - `hidden-terminal`: declares `terminal: false`, yet opens one.
 * - `hidden-pause`: declares `pause: false`, yet pauses.
 * - `hidden-external-watch`: declares `externalWatch: false`, yet watches.
 * - `volumes-accepted`: declares `volumes: false`, yet its provider (hand-made)
 *   answers `provider.volumes` as if it kept them.
 *
 * `honest` lies about nothing: the cases each lie fails pass against it.
 */
export const LIES = [
  'honest',
  'memory-limit-ignored',
  'memory-limit-accepted',
  'egress-accepted',
  'usage-missing',
  'wrong-environment',
  'hidden-terminal',
  'hidden-pause',
  'hidden-external-watch',
  'volumes-accepted',
] as const
export type Lie = (typeof LIES)[number]

const BACKEND = 'test:dishonest'

/** What the honest stub declares: no isolation, no limits, no network control but allow-all. */
const HONEST: SandboxEnforcementDeclaration = {
  isolation: 'none',
  environment: 'basic',
  memoryLimit: false,
  oomReporting: false,
  survivesOutOfMemory: false,
  processLimit: false,
  egress: ['allow-all'],
  denyAllNetwork: false,
  terminal: false,
  pause: false,
  reconnect: false,
  externalWatch: false,
  snapshot: false,
  memorySnapshot: false,
  measuredUsage: ['cpuTimeMs'],
  volumes: false,
}

function declarationOf(lie: Lie): SandboxEnforcementDeclaration {
  switch (lie) {
    case 'memory-limit-ignored':
      return { ...HONEST, memoryLimit: true, oomReporting: true, survivesOutOfMemory: true }
    case 'usage-missing':
      return { ...HONEST, measuredUsage: ['cpuTimeMs', 'memoryBytes'] }
    default:
      return HONEST
  }
}

/** A command "run" by the stub: nothing runs, and it succeeds at once. */
function ranNothing(): SandboxExecResult {
  return {
    exitCode: 0,
    stdout: '',
    stderr: '',
    timedOut: false,
    aborted: false,
    oomKilled: false,
    durationMs: 0,
    stdoutTruncated: false,
    stderrTruncated: false,
  }
}

/**
 * A backend with no processes at all: commands succeed without running, and
 * files live in a map. Enough for the suite's cases about declarations,
 * which is all it is run against.
 */
class StubBackend implements CordonSandboxBackend {
  readonly tier = 'test'
  readonly name = BACKEND
  constructor(private readonly lie: Lie) {}

  async create(options: SandboxBackendOptions): Promise<CordonBackendSandbox> {
    const lie = this.lie
    const id = options.sandboxId ?? newSandboxId()
    const files = new Map<string, Uint8Array>()
    let destroyed = false
    const live = () => {
      if (destroyed) throw new SandboxDestroyedError(id)
    }
    const environment: SandboxEnvironment =
      lie === 'wrong-environment' ? 'linux-namespace' : 'basic'
    const usage: SandboxBackendUsage = { cpuTimeMs: 1 }
    const process = () => {
      let end: (result: SandboxExecResult) => void = () => {}
      const ended = new Promise<SandboxExecResult>((resolve) => {
        end = resolve
      })
      return {
        id: `proc_${Math.random().toString(36).slice(2)}`,
        pid: 1,
        write: async () => {},
        closeStdin: async () => {},
        kill: async () => end({ ...ranNothing(), exitCode: -1, signal: 'SIGKILL' }),
        wait: () => ended,
        async [Symbol.asyncDispose]() {
          end({ ...ranNothing(), exitCode: -1, signal: 'SIGKILL' })
        },
      }
    }
    const sandbox: CordonBackendSandbox = {
      id,
      get status() {
        return destroyed ? ('destroyed' as const) : ('ready' as const)
      },
      rootDir: '/stub',
      environment,
      enforcement: {
        backend: BACKEND,
        isolation: 'none',
        egress: { kind: (options.egress ?? { kind: 'allow-all' }).kind },
        // A limit it ignores is reported as not enforced: the report is honest, the declaration not.
        limits: {},
        mounts: [],
      },
      exec: async (command, args = []) => {
        live()
        // `echo` is the one command it answers, as the suite's checks that a sandbox still runs use it.
        return command === 'echo'
          ? { ...ranNothing(), stdout: `${args.join(' ')}\n` }
          : ranNothing()
      },
      start: async () => {
        live()
        return process()
      },
      writeFile: async (path, content) => {
        live()
        files.set(path, typeof content === 'string' ? new TextEncoder().encode(content) : content)
      },
      readFile: async (path) => {
        live()
        return Buffer.from(files.get(path) ?? new Uint8Array())
      },
      writeFileStream: async () => live(),
      readFileStream: async () => (async function* () {})(),
      listFiles: async () => [],
      watchDirectory: async (_path, watchOptions = {}) => {
        live()
        if (watchOptions.external && lie !== 'hidden-external-watch')
          throw new SandboxControlRefusedError(
            'watchDirectory.external',
            BACKEND,
            'the stub sees no changes',
          )
        return {
          async *[Symbol.asyncIterator]() {},
          close: async () => {},
          async [Symbol.asyncDispose]() {},
        }
      },
      usage: async () => usage,
      ...(lie === 'hidden-terminal'
        ? {
            openTerminal: async () => ({
              write: async () => {},
              resize: async () => {},
              onData: () => () => {},
              exited: Promise.resolve(0),
              kill: async () => {},
              async [Symbol.asyncDispose]() {},
            }),
          }
        : {}),
      ...(lie === 'hidden-pause' ? { pause: async () => {}, resume: async () => {} } : {}),
      async destroy() {
        destroyed = true
      },
      async [Symbol.asyncDispose]() {
        destroyed = true
      },
    }
    return sandbox
  }

  async close(): Promise<void> {}
}

/** A provider of the stub backend that tells the lie `lie`. */
export function dishonestProvider(lie: Lie): CordonSandboxProvider {
  const definition = defineBackend<{ readonly tier: 'test' }>({
    name: BACKEND,
    tier: 'test',
    selects: (backend) => backend.tier === 'test',
    configSchema: z
      .object({ tier: z.literal('test') })
      .strict()
      .readonly(),
    layout: 'none',
    enforcement: declarationOf(lie),
    load: async () => () => new StubBackend(lie),
  })
  const provider = composeProvider({
    // It enforces only allow-all, so that is its default (core's is deny-all).
    config: { backend: { tier: 'test' }, defaultEgress: { kind: 'allow-all' } },
    definition,
    layout: undefined,
    loadBackend: async () => new StubBackend(lie),
  })
  if (lie === 'volumes-accepted') {
    // Accepts every call and keeps nothing anywhere a sandbox could mount.
    const kept = new Map<string, number>()
    const info = (name: string) => ({
      name,
      sizeMb: kept.get(name) ?? 0,
      createdAt: 0,
      lastUsedAt: 0,
      usedBy: [],
    })
    return {
      ...provider,
      volumes: {
        create: async ({ name, sizeMb }) => {
          kept.set(name, sizeMb)
          return info(name)
        },
        list: async () => [...kept.keys()].map(info),
        remove: async (name) => {
          kept.delete(name)
        },
      },
    }
  }
  if (lie !== 'memory-limit-accepted' && lie !== 'egress-accepted') return provider
  // A provider that is not composeProvider's: it takes what it cannot
  // enforce and drops it instead of refusing, as the reference's did.
  return {
    ...provider,
    create: (config: SandboxCreateConfig = {}) => {
      const { memoryLimitMb: _dropped, ...withoutLimit } = config
      const { egress: _ignored, ...withoutEgress } = config
      return provider.create(lie === 'memory-limit-accepted' ? withoutLimit : withoutEgress)
    },
  }
}
