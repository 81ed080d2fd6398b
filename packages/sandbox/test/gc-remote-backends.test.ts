import { execFile } from 'node:child_process'
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { aciEntrypointPath } from '@cordon/backend-aci'
import {
  closeTestArmStandin,
  startTestArmStandin,
  startTestOrchestrator,
  type TestArmStandin,
  type TestOrchestratorStandin,
} from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSandboxProvider } from '../src/index.js'
import { CLI, cordon, run } from './run-cli.js'

const runNode = promisify(execFile)
const creator = fileURLToPath(new URL('./fixtures/detached-creator.mjs', import.meta.url))
/** An engine address that leads nowhere: these runs sweep only the backend under test. */
const NO_ENGINE = { DOCKER_HOST: 'unix:///nonexistent/docker.sock' }

/** Resolves once the clock has passed `endsAt` (ms since the epoch). */
async function pastEndTime(endsAt: number): Promise<void> {
  while (Date.now() <= endsAt + 200) await new Promise((resolve) => setTimeout(resolve, 250))
}

/**
 * Makes a detached sandbox in a second Node process that then exits, as a
 * host that dies would: nothing of this process holds it.
 */
async function detachedFromAnotherProcess(options: {
  backend: object
  tokenField: string
  token: string
  store: string
  lifetimeMs: number
  pause?: boolean
  /** Not detached: the process exits without closing its provider, as a host that dies. */
  attached?: boolean
}): Promise<{ id: string; endsAt: number }> {
  const { stdout } = await runNode(process.execPath, [creator], {
    env: {
      ...process.env,
      CORDON_TEST_BACKEND: JSON.stringify(options.backend),
      CORDON_TEST_TOKEN_FIELD: options.tokenField,
      CORDON_TEST_TOKEN: options.token,
      CORDON_TEST_STORE: options.store,
      CORDON_TEST_LIFETIME_MS: String(options.lifetimeMs),
      CORDON_TEST_PAUSE: options.pause ? '1' : '0',
      CORDON_TEST_ATTACHED: options.attached ? '1' : '0',
    },
    timeout: 120_000,
  })
  const [, id, endsAt] = /sandbox (sbx_\w+) ends (\d+)/.exec(stdout) ?? []
  expect(id, stdout).toBeDefined()
  return { id: id!, endsAt: Number(endsAt) }
}

/** Files in a fresh directory, removed by the caller. */
function scratch(prefix: string): { dir: string; write(name: string, content: unknown): string } {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  return {
    dir,
    write(name, content) {
      const path = join(dir, name)
      writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content))
      return path
    },
  }
}

describe('cordon gc --microvm, against the orchestrator stand-in', () => {
  let standin: TestOrchestratorStandin
  let files: ReturnType<typeof scratch>
  let store: string
  let config: string
  beforeAll(async () => {
    standin = await startTestOrchestrator()
    files = scratch('cordon-gc-microvm-')
    store = join(files.dir, 'credentials')
    mkdirSync(store, { mode: 0o700 })
    // The fields that pick the backend (tier, service) may be left out.
    config = files.write('microvm.json', {
      orchestratorEndpoint: standin.backendConfig().orchestratorEndpoint,
    })
  })
  afterAll(async () => {
    rmSync(files?.dir ?? '/nonexistent', { recursive: true, force: true })
    await standin?.close()
  })

  const guestState = async (id: string): Promise<string | undefined> => {
    const response = await fetch(
      `${standin.backendConfig().orchestratorEndpoint}/v1/sandboxes/${id}`,
      { headers: { authorization: `Bearer ${standin.token}` } },
    )
    if (response.status === 404) return undefined
    expect(response.status).toBe(200)
    return ((await response.json()) as { state: string }).state
  }

  it('removes a detached guest past its end time (left paused, which the orchestrator never ends), keeps one that has not ended and its credential; --dry-run removes nothing', async () => {
    const { getToken: _, ...backend } = standin.backendConfig()
    const made = { backend, tokenField: 'getToken', token: standin.token, store }
    // Long enough for a loaded machine to create and pause it before its end.
    const ended = await detachedFromAnotherProcess({ ...made, lifetimeMs: 10_000, pause: true })
    const live = await detachedFromAnotherProcess({ ...made, lifetimeMs: 180_000 })
    try {
      await pastEndTime(ended.endsAt)
      expect(await guestState(ended.id)).toBe('paused')
      // The stand-in's guests are containers of this engine: a Docker gc (or a
      // Docker provider's background sweep) leaves the guest past its end time
      // to its orchestrator instead of removing it underneath.
      const engineGc = await cordon(['gc', '--dry-run', '--label', `cordon.sandbox=${ended.id}`])
      expect(engineGc.code, engineGc.stderr).toBe(0)
      expect(engineGc.stdout).toMatch(/would remove 0 containers/)
      const env = { ...NO_ENGINE, CORDON_ORCHESTRATOR_TOKEN: standin.token }
      const where = `cordon gc (microvm ${standin.backendConfig().orchestratorEndpoint})`

      const dry = await cordon(
        ['gc', '--dry-run', '--microvm', config, '--credential-store', store],
        env,
      )
      expect(dry.code, dry.stderr).toBe(0)
      expect(dry.stdout).toContain('cordon gc: skipped the Docker Engine: ')
      expect(dry.stdout).toContain(
        `${where}: would remove 1 detached guests past their end time: ${ended.id}\n`,
      )
      expect(dry.stdout).toMatch(/would remove 1 credentials of ended detached sandboxes/)
      expect(await guestState(ended.id)).toBe('paused')
      expect(readdirSync(store).sort()).toEqual([`${ended.id}.json`, `${live.id}.json`].sort())

      const real = await cordon(['gc', '--microvm', config, '--credential-store', store], env)
      expect(real.code, real.stderr).toBe(0)
      expect(real.stdout).toContain(
        `${where}: removed 1 detached guests past their end time: ${ended.id}\n`,
      )
      expect(await guestState(ended.id)).toBeUndefined()
      // The one that has not ended runs on, and a host still reaches it with its kept credential.
      expect(await guestState(live.id)).toBe('running')
      expect(readdirSync(store)).toEqual([`${live.id}.json`])

      const again = await cordon(['gc', '--microvm', config, '--credential-store', store], env)
      expect(again.stdout).toContain(`${where}: removed 0 detached guests past their end time\n`)
    } finally {
      const provider = createSandboxProvider({
        backend: standin.backendConfig(),
        credentialStore: store,
      })
      try {
        await (await provider.connect(live.id)).destroy()
      } finally {
        await provider.close()
      }
    }
  }, 240_000)

  it('removes a guest, not detached, whose host process on this machine has ended (left paused, its agent frozen); --dry-run removes nothing', async () => {
    const { getToken: _, ...backend } = standin.backendConfig()
    const made = { backend, tokenField: 'getToken', token: standin.token, store }
    const orphan = await detachedFromAnotherProcess({
      ...made,
      lifetimeMs: 180_000,
      pause: true,
      attached: true,
    })
    try {
      expect(await guestState(orphan.id)).toBe('paused')
      const env = { ...NO_ENGINE, CORDON_ORCHESTRATOR_TOKEN: standin.token }
      const where = `cordon gc (microvm ${standin.backendConfig().orchestratorEndpoint})`
      const dry = await cordon(['gc', '--dry-run', '--microvm', config], env)
      expect(dry.code, dry.stderr).toBe(0)
      expect(dry.stdout).toContain(
        `${where}: would remove 1 guests whose host process on this machine has ended: ${orphan.id}\n`,
      )
      expect(await guestState(orphan.id)).toBe('paused')
      const real = await cordon(['gc', '--microvm', config], env)
      expect(real.code, real.stderr).toBe(0)
      expect(real.stdout).toContain(
        `${where}: removed 1 guests whose host process on this machine has ended: ${orphan.id}\n`,
      )
      expect(await guestState(orphan.id)).toBeUndefined()
    } finally {
      await fetch(`${standin.backendConfig().orchestratorEndpoint}/v1/sandboxes/${orphan.id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${standin.token}` },
      })
    }
  }, 240_000)

  it('with an engine reachable, sweeps it too, and keeps the credential of a live detached guest the engine knows nothing of', async () => {
    const provider = createSandboxProvider({
      backend: standin.backendConfig(),
      credentialStore: store,
    })
    const live = await provider.create({ detached: true, lifetimeMs: 120_000 })
    try {
      const result = await cordon(
        ['gc', '--dry-run', '--microvm', config, '--credential-store', store],
        { CORDON_ORCHESTRATOR_TOKEN: standin.token },
      )
      expect(result.code, result.stderr).toBe(0)
      expect(result.stdout).toMatch(/^cordon gc \(unix:\/\/.*\): would remove \d+ containers/m)
      expect(result.stdout).toContain('would remove 0 detached guests past their end time\n')
      expect(result.stdout).toMatch(/would remove 0 credentials of ended detached sandboxes/)
      expect(readdirSync(store)).toEqual([`${live.id}.json`])
    } finally {
      await live.destroy()
      await provider.close()
    }
  })

  it("removes cordon's snapshots on the control plane past their retention (--snapshot-retention, else the config's snapshotRetentionMs, else 7 days); --dry-run removes nothing", async () => {
    const provider = createSandboxProvider({
      backend: standin.backendConfig(),
      credentialStore: false,
    })
    try {
      const source = await provider.create()
      const snapshot = await source.snapshot()
      await source.destroy()
      const listed = async () => (await provider.snapshots!.list()).map((taken) => taken.id)
      const env = { ...NO_ENGINE, CORDON_ORCHESTRATOR_TOKEN: standin.token }
      const where = `cordon gc (microvm ${standin.backendConfig().orchestratorEndpoint})`
      const sweep = async (args: string[]) => {
        const result = await cordon(['gc', ...args, '--credential-store', store], env)
        expect(result.code, result.stderr).toBe(0)
        return result.stdout
      }

      expect(await sweep(['--microvm', config])).toContain(
        `${where}: removed 0 snapshots past their retention\n`,
      )
      expect(
        await sweep(['--dry-run', '--snapshot-retention', '1ms', '--microvm', config]),
      ).toContain(`${where}: would remove 1 snapshots past their retention: ${snapshot.id}\n`)
      expect(await listed()).toEqual([snapshot.id])
      const shortRetention = files.write('short-retention.json', {
        orchestratorEndpoint: standin.backendConfig().orchestratorEndpoint,
        snapshotRetentionMs: 1,
      })
      expect(await sweep(['--microvm', shortRetention])).toContain(
        `${where}: removed 1 snapshots past their retention: ${snapshot.id}\n`,
      )
      expect(await listed()).toEqual([])
    } finally {
      await provider.close()
    }
  }, 120_000)

  it('a missing token, an unreadable file, a file the schema refuses, or a token in the file is a usage error naming the flag', async () => {
    const env = { ...NO_ENGINE, CORDON_ORCHESTRATOR_TOKEN: standin.token }
    const usage = async (args: string[], environment: Record<string, string>) => {
      const result = await cordon(['gc', ...args], environment)
      expect(result.code, result.stdout).toBe(64)
      expect(result.stdout).toBe('')
      return result.stderr
    }
    expect(
      await usage(['--microvm', config], { ...NO_ENGINE, CORDON_ORCHESTRATOR_TOKEN: '' }),
    ).toMatch(
      /^cordon gc: --microvm needs .* in the environment variable CORDON_ORCHESTRATOR_TOKEN\n/,
    )
    expect(await usage(['--microvm', join(files.dir, 'absent.json')], env)).toContain(
      `cordon gc: --microvm ${join(files.dir, 'absent.json')}: cannot read it (ENOENT)`,
    )
    const notJson = files.write('not.json', 'orchestratorEndpoint: x')
    expect(await usage(['--microvm', notJson], env)).toContain(`--microvm ${notJson}: not JSON`)
    const badUrl = files.write('bad.json', { orchestratorEndpoint: 'not a url', template: 7 })
    const refused = await usage(['--microvm', badUrl], env)
    // The backend's own schema: every key it refuses, named.
    expect(refused).toContain(
      `cordon gc: --microvm ${badUrl}: Invalid microvm:self-hosted backend config (2 problems)`,
    )
    expect(refused).toMatch(/- orchestratorEndpoint: /)
    expect(refused).toMatch(/- template: /)
    const withToken = files.write('token.json', {
      orchestratorEndpoint: standin.backendConfig().orchestratorEndpoint,
      getToken: standin.token,
    })
    expect(await usage(['--microvm', withToken], env)).toContain(
      `--microvm ${withToken}: getToken has no place in the file; the token comes from CORDON_ORCHESTRATOR_TOKEN`,
    )
  })

  it('a control plane that refuses the token is reported, and gc exits 1', async () => {
    const result = await cordon(['gc', '--microvm', config, '--credential-store', store], {
      ...NO_ENGINE,
      CORDON_ORCHESTRATOR_TOKEN: 'not-the-token',
    })
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(
      `cordon gc (microvm ${standin.backendConfig().orchestratorEndpoint}): could not sweep: `,
    )
  })
})

describe('cordon gc --aci, against the ARM stand-in', () => {
  let standin: TestArmStandin
  let files: ReturnType<typeof scratch>
  let store: string
  let config: string
  beforeAll(async () => {
    standin = await startTestArmStandin({ entrypointPath: aciEntrypointPath(), poolSize: 2 })
    files = scratch('cordon-gc-aci-')
    store = join(files.dir, 'credentials')
    mkdirSync(store, { mode: 0o700 })
    config = files.write('aci.json', standin.backendConfig())
  })
  afterAll(async () => {
    rmSync(files?.dir ?? '/nonexistent', { recursive: true, force: true })
    await closeTestArmStandin(standin)
  })

  const groupOf = (id: string) => `cordon-${id.slice(4)}`
  const groupState = async (id: string): Promise<string | undefined> => {
    const { subscriptionId, resourceGroup } = standin.ids
    const response = await fetch(
      `${standin.url}/subscriptions/${subscriptionId}/resourceGroups/${resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${groupOf(id)}?api-version=2025-09-01`,
      { headers: { authorization: `Bearer ${standin.token}` } },
    )
    if (response.status === 404) return undefined
    expect(response.status).toBe(200)
    const group = (await response.json()) as { properties: { instanceView: { state: string } } }
    return group.properties.instanceView.state
  }

  it('removes the group of a detached sandbox past its end time, keeps one that has not ended and its credential; --dry-run removes nothing', async () => {
    const made = {
      backend: standin.backendConfig(),
      tokenField: 'getArmToken',
      token: standin.token,
      store,
    }
    // Long enough for a loaded machine to claim it before its agent ends it.
    const ended = await detachedFromAnotherProcess({ ...made, lifetimeMs: 15_000 })
    const live = await detachedFromAnotherProcess({ ...made, lifetimeMs: 180_000 })
    try {
      await pastEndTime(ended.endsAt)
      expect(await groupState(ended.id)).toBeDefined()
      const env = { ...NO_ENGINE, CORDON_ARM_TOKEN: standin.token }
      const where = `cordon gc (aci ${standin.ids.resourceGroup})`

      const dry = await cordon(
        ['gc', '--dry-run', '--aci', config, '--credential-store', store],
        env,
      )
      expect(dry.code, dry.stderr).toBe(0)
      expect(dry.stdout).toContain(
        `${where}: would remove 1 detached groups past their end time: ${groupOf(ended.id)}\n`,
      )
      expect(await groupState(ended.id)).toBeDefined()
      expect(readdirSync(store).sort()).toEqual([`${ended.id}.json`, `${live.id}.json`].sort())

      const real = await cordon(['gc', '--aci', config, '--credential-store', store], env)
      expect(real.code, real.stderr).toBe(0)
      expect(real.stdout).toContain(
        `${where}: removed 1 detached groups past their end time: ${groupOf(ended.id)}\n`,
      )
      expect(real.stdout).toMatch(/removed 1 credentials of ended detached sandboxes/)
      expect(await groupState(ended.id)).toBeUndefined()
      expect(await groupState(live.id)).toBe('Running')
      expect(readdirSync(store)).toEqual([`${live.id}.json`])
    } finally {
      const provider = createSandboxProvider({
        backend: { ...standin.backendConfig(), getArmToken: async () => standin.token },
        layout: { outputs: { source: { type: 'inImage' } } },
        credentialStore: store,
      })
      try {
        await (await provider.connect(live.id)).destroy()
      } finally {
        await provider.close()
      }
    }
  }, 300_000)

  it('a missing token or a file the schema refuses is a usage error naming the flag and the key', async () => {
    const missing = await cordon(['gc', '--aci', config], { ...NO_ENGINE, CORDON_ARM_TOKEN: '' })
    expect(missing.code).toBe(64)
    expect(missing.stderr).toMatch(
      /^cordon gc: --aci needs a bearer token for Azure Resource Manager .* CORDON_ARM_TOKEN\n/,
    )
    const bad = files.write('bad.json', { ...standin.backendConfig(), resourceGroup: '' })
    const refused = await cordon(['gc', '--aci', bad], {
      ...NO_ENGINE,
      CORDON_ARM_TOKEN: standin.token,
    })
    expect(refused.code).toBe(64)
    expect(refused.stderr).toContain(
      `cordon gc: --aci ${bad}: Invalid container:aci-standby-pool backend config (1 problem):\n  - resourceGroup: `,
    )
  })
})

describe('cordon gc with a backend package that is not installed', () => {
  it('names the package to install, and removes nothing', async () => {
    // The umbrella as a stranger installs it, with neither @cordon/backend-aci nor -microvm.
    const root = mkdtempSync(join(tmpdir(), 'cordon-gc-no-backend-'))
    try {
      const scope = join(root, 'node_modules', '@cordon')
      const packages = fileURLToPath(new URL('../../', import.meta.url))
      mkdirSync(join(scope, 'sandbox'), { recursive: true })
      for (const name of ['core', 'builtin-backends', 'egress'])
        symlinkSync(join(packages, name), join(scope, name))
      cpSync(join(packages, 'sandbox', 'package.json'), join(scope, 'sandbox', 'package.json'))
      cpSync(join(packages, 'sandbox', 'dist'), join(scope, 'sandbox', 'dist'), {
        recursive: true,
      })
      const cli = join(scope, 'sandbox', CLI.slice(CLI.indexOf('/dist/') + 1))
      writeFileSync(
        join(root, 'aci.json'),
        JSON.stringify({
          subscriptionId: 'sub',
          resourceGroup: 'rg',
          location: 'westeurope',
          standbyPoolResourceId:
            '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.StandbyPool/standbyContainerGroupPools/pool',
          containerGroupProfileResourceId:
            '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.ContainerInstance/containerGroupProfiles/profile',
          allowPublicAddress: true,
          armEndpoint: 'http://127.0.0.1:9/',
        }),
      )
      writeFileSync(
        join(root, 'microvm.json'),
        JSON.stringify({ orchestratorEndpoint: 'http://127.0.0.1:9/' }),
      )
      for (const [flag, variable, packageName] of [
        ['--aci', 'CORDON_ARM_TOKEN', '@cordon/backend-aci'],
        ['--microvm', 'CORDON_ORCHESTRATOR_TOKEN', '@cordon/backend-microvm'],
      ] as const) {
        const result = await run(
          [process.execPath, cli, 'gc', flag, join(root, `${flag.slice(2)}.json`)],
          { env: { ...NO_ENGINE, [variable]: 'token' }, cwd: root },
        )
        expect(result.code, result.stderr).toBe(125)
        expect(result.stdout).toBe('')
        expect(result.stderr).toContain(
          `needs the package ${packageName}; install it with: npm install ${packageName}`,
        )
      }
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })
})
