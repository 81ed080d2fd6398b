/**
 * A stranger's projects, built from the tarballs npm would receive: each
 * installs packed cordon packages with npm (not the workspace), compiles a
 * small program with `strict` and `skipLibCheck: false`, and runs it.
 *
 * - `docker-host` installs what a Docker host installs (`@cordon/sandbox`
 *   and `@cordon/backend-docker`) and runs a sandbox on the real engine.
 * - `everything` installs every publishable package and type-checks one
 *   import from each entry point (but `@cordon/ai-sdk`'s, see below). Peers
 *   that are not cordon's (the OpenTelemetry API `@cordon/otel` needs, the
 *   OpenAI Agents SDK) come from the npm registry, as they would for anyone.
 * - `ai-sdk-host` installs `@cordon/ai-sdk` (npm brings its peers, the AI
 *   SDK harness, from the registry) and runs a harness session on the real
 *   engine. The AI SDK's own declarations name `HeadersInit` (the DOM lib)
 *   and `json-schema` types without depending on them, so this project has
 *   what every AI SDK user's project has: the DOM lib and `@types/json-schema`.
 */
import { execFile } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { promisify } from 'node:util'
import { strangerTsconfig } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { packPackage } from './pack.js'
import { publishablePackages } from './publishable-packages.js'

const run = promisify(execFile)
let work = ''
const tarballs = new Map<string, string>()
const RUN_LABEL = process.env.CORDON_TEST_RUN_ID ?? `consumer-${process.pid}`

interface Outcome {
  readonly install: string
  readonly typeCheck: { code: number; output: string }
  readonly output: string
}

async function project(
  name: string,
  packages: readonly string[],
  program: string,
  extra: { lib?: readonly string[]; devDependencies?: Record<string, string> } = {},
): Promise<Outcome> {
  const dir = join(work, name)
  await mkdir(dir, { recursive: true })
  const dependencies = Object.fromEntries(
    packages.map((pkg) => [pkg, `file:${tarballs.get(pkg)}`] as const),
  )
  await writeFile(
    join(dir, 'package.json'),
    JSON.stringify({
      name,
      private: true,
      type: 'module',
      dependencies,
      devDependencies: {
        typescript: '5.9.3',
        '@types/node': '20.19.43',
        ...extra.devDependencies,
      },
    }),
  )
  await writeFile(
    join(dir, 'tsconfig.json'),
    JSON.stringify(strangerTsconfig(['main.ts'], extra.lib)),
  )
  await writeFile(join(dir, 'main.ts'), program)
  const install = await run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd: dir,
    timeout: 240_000,
  }).then(
    () => 'ok',
    (error: { stderr?: string; message: string }) => error.stderr || error.message,
  )
  if (install !== 'ok') return { install, typeCheck: { code: -1, output: '' }, output: '' }
  const typeCheck = await run(process.execPath, [join(dir, 'node_modules/typescript/bin/tsc')], {
    cwd: dir,
  }).then(
    ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
    (error: { code?: number; stdout?: string; stderr?: string }) => ({
      code: error.code ?? 1,
      output: `${error.stdout ?? ''}${error.stderr ?? ''}`,
    }),
  )
  if (typeCheck.code !== 0) return { install, typeCheck, output: '' }
  const output = await run(process.execPath, [join(dir, 'out/main.js')], {
    cwd: dir,
    timeout: 120_000,
    env: { ...process.env, RUN_LABEL },
  }).then(
    ({ stdout }) => stdout,
    (error: { stdout?: string; stderr?: string; message: string }) =>
      `${error.stdout ?? ''}\nFAILED: ${error.stderr || error.message}`,
  )
  return { install, typeCheck, output }
}

const DOCKER_HOST_PROGRAM = `import { execFileSync } from 'node:child_process'
import {
  type CordonSandbox,
  createSandboxProvider,
  SandboxBackendNotInstalledError,
} from '@cordon/sandbox'

const provider = createSandboxProvider({
  backend: {
    tier: 'container',
    image: 'cordon-test/busybox:latest',
    labels: { 'cordon-test.run': process.env.RUN_LABEL ?? 'consumer' },
  },
  layout: { outputs: { source: { type: 'ephemeral' } } },
})
let id = ''
{
  await using sandbox: CordonSandbox = await provider.create({ env: { WHO: 'a stranger' } })
  id = sandbox.id
  await sandbox.writeFile('hello.txt', 'packed and installed')
  const result = await sandbox.exec('sh', ['-c', 'echo "hello, $WHO"; cat hello.txt'])
  // The installed @cordon/agent carries cordon-launcher, which starts the commands.
  const launchedBy = (await sandbox.exec('sh', ['-c', 'cat /proc/$PPID/comm'])).stdout.trim()
  // The runtime volume's code cache was made on this install and fits its Node:
  // the agent, started as the container's entry starts it, says whether V8 took it.
  const docker = (...args: string[]) => execFileSync('docker', args, { encoding: 'utf8' }).trim()
  const entry = JSON.parse(docker('inspect', '-f', '{{json .Config.Entrypoint}}', \`cordon-\${id}\`)) as string[]
  const agent = entry[1] === '--agent' ? entry.slice(2) : entry
  const codeCache = docker('exec', '-u', '0', \`cordon-\${id}\`, ...agent, '--code-cache')
  console.log(JSON.stringify({ id, stdout: result.stdout, status: sandbox.status, launchedBy, codeCache }))
}
await provider.close()

const microvm = createSandboxProvider({
  backend: {
    tier: 'microvm',
    service: 'self-hosted',
    orchestratorEndpoint: 'http://127.0.0.1:1',
    getToken: async () => 'token',
  },
})
const missing = await microvm.create().catch((error: unknown) => error)
console.log(
  JSON.stringify({
    notInstalled: SandboxBackendNotInstalledError.isInstance(missing),
    packageName: SandboxBackendNotInstalledError.isInstance(missing) ? missing.packageName : '',
  }),
)
`

const EVERYTHING_PROGRAM = `import { agentProgramPath } from '@cordon/agent'
import { FramedConnection } from '@cordon/agent/protocol'
import { AgentClient } from '@cordon/agent/sandbox'
import { createBackend as createAciBackend } from '@cordon/backend-aci'
import { createBackend as createDockerBackend, createDockerSandboxProvider } from '@cordon/backend-docker'
import { createBackend as createMicroVMBackend, VsockAgentTransport } from '@cordon/backend-microvm'
import { builtinBackends } from '@cordon/builtin-backends'
import type { SandboxConformanceOptions } from '@cordon/conformance'
import { isHostAllowed, resolveLayout, type Sandbox } from '@cordon/core'
import { composeProvider, withDeadline } from '@cordon/core/backend'
import { EgressProxy, splitAuthority } from '@cordon/egress'
import { CordonSandboxClient } from '@cordon/openai-agents'
import { chainEventListeners, type CordonTelemetry, cordonTelemetry } from '@cordon/otel'
import { createSandboxProvider } from '@cordon/sandbox'

const types: Array<Sandbox | SandboxConformanceOptions | CordonTelemetry> = []
const values = [
  agentProgramPath,
  FramedConnection,
  AgentClient,
  createAciBackend,
  createDockerBackend,
  createDockerSandboxProvider,
  createMicroVMBackend,
  VsockAgentTransport,
  builtinBackends,
  isHostAllowed,
  resolveLayout,
  composeProvider,
  withDeadline,
  EgressProxy,
  splitAuthority,
  CordonSandboxClient,
  createSandboxProvider,
  cordonTelemetry,
  chainEventListeners,
]
console.log(JSON.stringify({ loaded: values.filter((value) => typeof value === 'function').length, types: types.length }))
`

const AI_SDK_HOST_PROGRAM = `import { type CordonHarnessSession, createCordonHarnessSandbox } from '@cordon/ai-sdk'
import { createSandboxProvider } from '@cordon/sandbox'

const provider = createSandboxProvider({
  backend: {
    tier: 'container',
    image: 'cordon-test/busybox:latest',
    labels: { 'cordon-test.run': process.env.RUN_LABEL ?? 'consumer' },
  },
  layout: { outputs: { source: { type: 'ephemeral' } } },
})
const harness = createCordonHarnessSandbox(provider)
const session = (await harness.createSession()) as CordonHarnessSession
const result = await session.restricted().run({ command: 'echo "$((6 * 7))"' })
await session.destroy()
await provider.close()
console.log(JSON.stringify({ spec: harness.specificationVersion, stdout: result.stdout }))
`

let dockerHost: Outcome
let everything: Outcome
let aiSdkHost: Outcome

/**
 * What a Docker host installs: `@cordon/sandbox` and `@cordon/backend-docker`,
 * and what those two depend on (unpublished, npm would look for it on the
 * registry; from npm, a host installs only the two).
 */
const DOCKER_HOST_PACKAGES = [
  '@cordon/sandbox',
  '@cordon/backend-docker',
  '@cordon/core',
  '@cordon/builtin-backends',
  '@cordon/egress',
  '@cordon/agent',
]

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'cordon-consumer-'))
  const tarballDir = join(work, 'tarballs')
  await mkdir(tarballDir)
  for (const entry of publishablePackages()) {
    tarballs.set(entry.manifest.name, packPackage(entry, tarballDir))
  }
  // The three projects share nothing but npm's cache (safe for concurrent
  // installs) and are made at once: most of each is npm waiting on the
  // registry, and one after another they were the package's longest file.
  ;[dockerHost, everything, aiSdkHost] = await Promise.all([
    project('docker-host', DOCKER_HOST_PACKAGES, DOCKER_HOST_PROGRAM),
    project('everything', [...tarballs.keys()], EVERYTHING_PROGRAM),
    project('ai-sdk-host', ['@cordon/ai-sdk', ...DOCKER_HOST_PACKAGES], AI_SDK_HOST_PROGRAM, {
      lib: ['ES2022', 'DOM'],
      devDependencies: { '@types/json-schema': '7.0.15' },
    }),
  ])
}, 600_000)

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true })
})

describe('a stranger installs the packed tarballs', () => {
  it('packs every publishable package with its workspace ranges resolved', () => {
    expect([...tarballs.values()].map((file) => basename(file)).sort()).toHaveLength(
      publishablePackages().length,
    )
  })

  it('a Docker host installs two packages with npm and type-checks strictly, libraries included', () => {
    expect(dockerHost.install).toBe('ok')
    expect(dockerHost.typeCheck.output).toBe('')
  })

  it('and runs a real sandbox, disposed on scope exit, with other backends not installed', () => {
    const [sandboxLine, missingLine] = dockerHost.output.trim().split('\n')
    expect(JSON.parse(sandboxLine ?? '{}')).toMatchObject({
      stdout: 'hello, a stranger\npacked and installed',
      status: 'ready',
      launchedBy: 'cordon-launcher',
      codeCache: 'used',
    })
    expect(JSON.parse(missingLine ?? '{}')).toEqual({
      notInstalled: true,
      packageName: '@cordon/backend-microvm',
    })
  })

  it('every entry point of every package (the AI SDK add-on: below) installs, type-checks and loads', () => {
    expect(everything.install).toBe('ok')
    expect(everything.typeCheck.output).toBe('')
    expect(JSON.parse(everything.output.trim() || '{}')).toEqual({ loaded: 19, types: 0 })
  })

  it('an AI SDK host installs the harness add-on with its peers from the registry and runs a session', () => {
    expect(aiSdkHost.install).toBe('ok')
    expect(aiSdkHost.typeCheck.output).toBe('')
    expect(JSON.parse(aiSdkHost.output.trim() || '{}')).toEqual({
      spec: 'harness-sandbox-v1',
      stdout: '42\n',
    })
  })
})
