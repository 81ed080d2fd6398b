import { randomBytes } from 'node:crypto'
import { mkdtemp, readdir, rm, rmdir } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  type OrchestratorStandin,
  type OrchestratorStandinOptions,
  startOrchestratorStandin,
} from '@cordon/orchestrator-standin'
import Dockerode from 'dockerode'
import { testRunLabels } from './test-run.js'

export type TestOrchestratorStandin = OrchestratorStandin & {
  readonly token: string
  /** The `microvm` backend config that points at this stand-in with its token. */
  backendConfig(): {
    tier: 'microvm'
    service: 'self-hosted'
    orchestratorEndpoint: string
    getToken: () => Promise<string>
  }
}

/**
 * Starts the orchestrator stand-in for one test file, with a fresh token and
 * its guests labelled with the run. Its `close()` is the microVM leak check:
 * it fails when a guest is still alive (a sandbox the backend did not delete),
 * or when, after closing, a container of the stand-in or its state directory
 * (the guests' vsock sockets and secret files) is left.
 */
export async function startTestOrchestrator(
  options: Partial<OrchestratorStandinOptions> = {},
): Promise<TestOrchestratorStandin> {
  const token = options.token ?? randomBytes(24).toString('base64url')
  const docker = options.docker ?? new Dockerode()
  // The stand-in keeps its state under os.tmpdir(); a directory of this
  // launcher's own shows what it left without looking at anyone else's.
  const parent = await mkdtemp(join(tmpdir(), 'cordon-test-orchestrator-'))
  const previous = process.env.TMPDIR
  process.env.TMPDIR = parent
  let standin: OrchestratorStandin
  try {
    standin = await startOrchestratorStandin({
      ...options,
      token,
      docker,
      labels: { ...testRunLabels(), ...options.labels },
    })
  } catch (error) {
    await rm(parent, { recursive: true, force: true })
    throw error
  } finally {
    if (previous === undefined) delete process.env.TMPDIR
    else process.env.TMPDIR = previous
  }
  const close = standin.close.bind(standin)
  return Object.assign(standin, {
    token,
    backendConfig: () => ({
      tier: 'microvm' as const,
      service: 'self-hosted' as const,
      orchestratorEndpoint: standin.url,
      getToken: async () => token,
    }),
    async close(): Promise<void> {
      const alive = standin.guests()
      await close()
      const containers = await docker.listContainers({
        all: true,
        filters: { label: [`cordon.standin=${standin.id}`] },
      })
      const files = await readdir(parent)
      await rmdir(parent).catch(() => {})
      const leaks = [
        ...alive.map((id) => `guest ${id} still alive`),
        ...containers.map((info) => `container ${info.Names[0] ?? info.Id}`),
        ...files.map((name) => `state ${join(parent, name)}`),
      ]
      if (leaks.length > 0)
        throw new Error(`the orchestrator stand-in was left with: ${leaks.join(', ')}`)
    },
  })
}
