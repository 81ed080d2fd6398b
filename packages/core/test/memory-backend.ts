import { Buffer } from 'node:buffer'
import type { CordonSandboxBackend } from '../src/backend-kit.js'
import { ExecOutputCollector, resolveBackendOptions } from '../src/backend-kit.js'
import {
  type CordonBackendSandbox,
  type SandboxBackendOptions,
  SandboxDestroyedError,
  type SandboxExecOptions,
} from '../src/index.js'

/**
 * A test double of a backend, for the provider's own logic (defaults, pool,
 * lifetimes, events, status). Real behaviour is tested against real backends
 * through @cordon/conformance.
 */
export class RecordingBackend implements CordonSandboxBackend {
  readonly tier = 'container' as const
  readonly name = 'test:recording'
  readonly requests: SandboxBackendOptions[] = []
  readonly execOptions: SandboxExecOptions[] = []
  readonly destroyed: string[] = []
  createDelayMs = 0
  /** How long each exec takes. */
  execDelayMs = 0
  failNext = false

  async create(options: SandboxBackendOptions): Promise<CordonBackendSandbox> {
    this.requests.push(options)
    const request = resolveBackendOptions(options)
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
      environment: 'linux-namespace',
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
      writeFile: async () => {},
      readFile: async () => Buffer.alloc(0),
      writeFileStream: async () => {},
      readFileStream: async () => (async function* () {})(),
      listFiles: async () => [],
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
