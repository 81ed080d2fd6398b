import { Buffer } from 'node:buffer'
import { z } from 'zod'
import type { CordonSandboxBackend } from '../src/backend-kit.js'
import { defineBackend, ExecOutputCollector, resolveBackendOptions } from '../src/backend-kit.js'
import {
  type CordonBackendSandbox,
  type SandboxBackendOptions,
  SandboxDestroyedError,
  type SandboxEnforcementDeclaration,
  type SandboxExecOptions,
  type SandboxProviderConfigFor,
} from '../src/index.js'

export interface RecordingConfig {
  readonly tier: 'test'
}
export type RecordingProviderConfig = SandboxProviderConfigFor<RecordingConfig>

const FULL_ENFORCEMENT: SandboxEnforcementDeclaration = {
  isolation: 'none',
  environment: 'basic',
  memoryLimit: true,
  oomReporting: true,
  survivesOutOfMemory: true,
  processLimit: true,
  egress: ['deny-all', 'allow-all', 'static', 'resolver'],
  denyAllNetwork: true,
  terminal: false,
  pause: false,
  reconnect: false,
  externalWatch: false,
  snapshot: false,
  memorySnapshot: false,
  measuredUsage: ['cpuTimeMs'],
  volumes: false,
}

/** The recording backend's definition; `enforcement` overrides what it declares. */
export function recordingDefinition(enforcement: Partial<SandboxEnforcementDeclaration> = {}) {
  return defineBackend<RecordingConfig>({
    name: 'test:recording',
    tier: 'test',
    selects: (backend) => backend.tier === 'test',
    configSchema: z
      .object({ tier: z.literal('test') })
      .strict()
      .readonly(),
    layout: 'optional',
    enforcement: { ...FULL_ENFORCEMENT, ...enforcement },
    load: async () => (() => new RecordingBackend()) as never,
  })
}

export const RECORDING = recordingDefinition()

/**
 * A test double of a backend, for the provider's own logic (defaults, pool,
 * lifetimes, events, status). Real behaviour is tested against real backends
 * through @cordon/conformance.
 */
export class RecordingBackend implements CordonSandboxBackend {
  constructor(private readonly definition = RECORDING) {}
  /** What `resolveBackendOptions` made of each request. */
  readonly resolved: ReturnType<typeof resolveBackendOptions>[] = []
  readonly tier = 'test' as const
  readonly name = 'test:recording'
  readonly requests: SandboxBackendOptions[] = []
  readonly execOptions: SandboxExecOptions[] = []
  readonly destroyed: string[] = []
  /** Each file call that reached the backend: its name and path. */
  readonly fileCalls: string[] = []
  createDelayMs = 0
  /** How long each exec takes. */
  execDelayMs = 0
  failNext = false

  async create(options: SandboxBackendOptions): Promise<CordonBackendSandbox> {
    const request = resolveBackendOptions<RecordingConfig>(options, this.definition, {
      tier: 'test',
    })
    this.requests.push(options)
    this.resolved.push(request)
    if (this.createDelayMs) await new Promise((resolve) => setTimeout(resolve, this.createDelayMs))
    if (this.failNext) {
      this.failNext = false
      throw new Error('create failed')
    }
    let destroyedFlag = false
    const backend = this
    const sandbox: CordonBackendSandbox = {
      id: request.id,
      get status() {
        return destroyedFlag ? ('destroyed' as const) : ('ready' as const)
      },
      rootDir: '/out',
      environment: 'basic',
      enforcement: {
        backend: 'test:recording',
        isolation: 'none',
        egress: { kind: request.egress.kind },
        limits: {
          ...(request.memoryLimitMb !== undefined ? { memoryLimitMb: request.memoryLimitMb } : {}),
          ...(request.maxProcesses !== undefined ? { maxProcesses: request.maxProcesses } : {}),
        },
        mounts: [],
      },
      async exec(command, _args, execOptions = {}) {
        if (destroyedFlag) throw new SandboxDestroyedError(request.id)
        backend.execOptions.push(execOptions)
        if (backend.execDelayMs)
          await new Promise((resolve) => setTimeout(resolve, backend.execDelayMs))
        const collector = new ExecOutputCollector({})
        collector.push('stdout', new TextEncoder().encode(command))
        return {
          exitCode: 0,
          timedOut: false,
          aborted: false,
          oomKilled: false,
          durationMs: 0,
          ...collector.finish(),
        }
      },
      start: async () => {
        throw new Error('not used')
      },
      writeFile: async (path) => {
        backend.fileCalls.push(`writeFile ${path}`)
      },
      readFile: async (path) => {
        backend.fileCalls.push(`readFile ${path}`)
        return Buffer.alloc(0)
      },
      writeFileStream: async (path) => {
        backend.fileCalls.push(`writeFileStream ${path}`)
      },
      writeFiles: async (files) => {
        backend.fileCalls.push(`writeFiles ${files.map((file) => file.path).join(' ')}`)
      },
      readFileStream: async () => (async function* () {})(),
      listFiles: async (path) => {
        backend.fileCalls.push(`listFiles ${path}`)
        return []
      },
      // cpuTimeMs as measured, and a figure of the whole host the definition may not declare.
      usage: async () => ({ cpuTimeMs: 7, memoryBytes: 123 }),
      async destroy() {
        if (!destroyedFlag) backend.destroyed.push(request.id)
        destroyedFlag = true
      },
      async [Symbol.asyncDispose]() {
        await this.destroy()
      },
    }
    return sandbox
  }

  async close(): Promise<void> {}
}
