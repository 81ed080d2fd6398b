import {
  ExecOutputCollector,
  type Sandbox,
  type SandboxBackend,
  type SandboxCreateRequest,
  SandboxDestroyedError,
  type SandboxStatus,
} from '../src/index.js'

/**
 * A test double of a backend, for the provider's own logic (defaults, pool,
 * lifetimes, events). Real behaviour is tested against real backends through
 * @cordon/conformance.
 */
export class RecordingBackend implements SandboxBackend {
  readonly name = 'test:recording'
  readonly requests: SandboxCreateRequest[] = []
  readonly destroyed: string[] = []
  createDelayMs = 0
  failNext = false

  async create(request: SandboxCreateRequest): Promise<Sandbox> {
    this.requests.push(request)
    if (this.createDelayMs) await new Promise((resolve) => setTimeout(resolve, this.createDelayMs))
    if (this.failNext) {
      this.failNext = false
      throw new Error('create failed')
    }
    let status: SandboxStatus = 'ready'
    const destroyed = this.destroyed
    const sandbox: Sandbox = {
      id: request.id,
      get status() {
        return status
      },
      rootDir: '/out',
      async exec(command) {
        if (status === 'destroyed') throw new SandboxDestroyedError(request.id)
        const collector = new ExecOutputCollector({})
        collector.push('stdout', new TextEncoder().encode(command))
        return {
          exitCode: 0,
          signal: null,
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
      readFile: async () => new Uint8Array(),
      writeFileStream: async () => {},
      readFileStream: async () => (async function* () {})(),
      listFiles: async () => [],
      async destroy() {
        if (status !== 'destroyed') destroyed.push(request.id)
        status = 'destroyed'
      },
    }
    return sandbox
  }

  async close(): Promise<void> {}
}
