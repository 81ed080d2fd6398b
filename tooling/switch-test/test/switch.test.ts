/**
 * The switch from `@namzu/sandbox` 2.0.1: `host/namzu-host.ts` is a host
 * program written against the reference. Only its two import specifiers are
 * changed (`@namzu/sandbox` and `@namzu/sdk` both become `@cordon/sandbox`);
 * the result must type-check under `strict` with `skipLibCheck: false`
 * against cordon's built packages, and run against the real engine with the
 * meanings the reference documented.
 */
import { execFile } from 'node:child_process'
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import {
  BUSYBOX_IMAGE,
  startTestOrchestrator,
  strangerTsconfig,
  TEST_RUN_LABEL,
  type TestOrchestratorStandin,
  testRunId,
} from '@cordon/test-support'
import Dockerode from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const run = promisify(execFile)
const here = dirname(fileURLToPath(import.meta.url))
const root = join(here, '..')
const work = join(root, '.switch')
const RUN_LABEL = testRunId()
const IMAGE = BUSYBOX_IMAGE

/** The one change a switching host makes. */
const SPECIFIERS: Readonly<Record<string, string>> = {
  '@namzu/sandbox': '@cordon/sandbox',
  '@namzu/sdk': '@cordon/sandbox',
}

function switchImports(source: string): string {
  return source.replace(/from '(@namzu\/[a-z-]+)'/g, (_whole, specifier: string) => {
    const replacement = SPECIFIERS[specifier]
    if (!replacement) throw new Error(`no cordon package for ${specifier}`)
    return `from '${replacement}'`
  })
}

let original = ''
let switched = ''
let typeCheck: { code: number; output: string } = { code: -1, output: '' }
// biome-ignore lint/suspicious/noExplicitAny: JSON read back from the host program, checked field by field below
let report: Record<string, any> = {}
let standin: TestOrchestratorStandin | undefined
const token = 'switch-test-token-0123456789'

beforeAll(async () => {
  original = await readFile(join(root, 'host/namzu-host.ts'), 'utf8')
  switched = switchImports(original)
  await rm(work, { recursive: true, force: true })
  await mkdir(work, { recursive: true })
  await writeFile(join(work, 'host.ts'), switched)
  // What a namzu host's own project would have: strict, and every library's
  // types checked (no skipLibCheck), with nothing newer than ES2022 in lib.
  await writeFile(join(work, 'tsconfig.json'), JSON.stringify(strangerTsconfig(['host.ts'])))
  const tsc = join(root, 'node_modules/typescript/bin/tsc')
  typeCheck = await run(process.execPath, [tsc, '-p', join(work, 'tsconfig.json')], { cwd: work })
    .then(({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }))
    .catch((error: { code?: number; stdout?: string; stderr?: string }) => ({
      code: error.code ?? 1,
      output: `${error.stdout ?? ''}${error.stderr ?? ''}`,
    }))
  if (typeCheck.code !== 0) return
  standin = await startTestOrchestrator({ token })
  const { stdout } = await run(process.execPath, [join(work, 'out/host.js')], {
    cwd: work,
    env: {
      ...process.env,
      HOST_IMAGE: IMAGE,
      RUN_LABEL,
      ORCHESTRATOR_URL: standin.url,
      ORCHESTRATOR_TOKEN: token,
    },
    timeout: 180_000,
  }).catch((error: { stdout?: string; message: string }) => ({
    stdout: error.stdout || JSON.stringify({ failure: error.message }),
  }))
  report = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}')
}, 240_000)

afterAll(async () => {
  await standin?.close()
})

describe('switching a namzu host to cordon by its imports', () => {
  it('changes nothing but the import specifiers', () => {
    const changed = original
      .split('\n')
      .map((line, index) => [line, switched.split('\n')[index]] as const)
      .filter(([before, after]) => before !== after)
    expect(changed.length).toBe(2)
    for (const [before, after] of changed) {
      expect(before).toMatch(/from '@namzu\/(sandbox|sdk)'$/)
      expect(after).toMatch(/from '@cordon\/sandbox'$/)
    }
  })

  it('type-checks strictly, libraries included, with zero errors', () => {
    expect(typeCheck.output).toBe('')
    expect(typeCheck.code).toBe(0)
  })

  it('runs to the end', () => {
    expect(report.failure).toBeUndefined()
    expect(report.prompt).toContain('/mnt/skills/pdf-tools.v2')
  })

  it("keeps the reference's constants and provider naming", () => {
    expect(report.constants).toEqual({
      timeout: 30_000,
      memory: 512,
      processes: 32,
      output: 10 * 1024 * 1024,
      paths: [
        '/mnt/user-data/outputs',
        '/mnt/user-data/uploads',
        '/mnt/user-data/scratch',
        '/mnt/user-data/tool_results',
        '/mnt/transcripts',
        '/mnt/skills',
      ],
    })
    expect(report.provider).toEqual({
      id: 'cordon-container-docker',
      name: '@cordon/sandbox: container:docker',
      environment: 'linux-namespace',
    })
    expect(report.sandbox).toMatchObject({
      status: 'ready',
      environment: 'linux-namespace',
      rootDir: '/mnt/user-data/outputs',
    })
    expect(report.sandbox.id).toMatch(/^sbx_/)
  })

  it('runs commands with the env, cwd and result the reference documents', () => {
    expect(report.exec).toEqual({
      exitCode: 3,
      // The last line is the sandbox's own uid (above 2^30, no host account's).
      stdout: expect.stringMatching(/^hello task-42\n\/tmp\n\d{10}\n$/),
      stderr: 'oops\n',
      signalPresent: false,
      signal: null,
      timedOut: false,
      durationIsNumber: true,
      stdoutTruncated: false,
    })
  })

  it("resolves a relative cwd against the workspace and makes a missing one, as the reference's worker did", () => {
    expect(report.cwd).toEqual({
      // create({ workingDirectory }) was made when the sandbox was; commands start there.
      workingDirectory: '/mnt/user-data/outputs/task-42\n',
      relative: '/mnt/user-data/outputs/build/objects\n',
      relativeExit: 0,
      relativeAgain: 'built\n',
    })
    expect(report.runscCwd).toEqual({
      workingDirectory: '/mnt/user-data/outputs/gvisor-task\n',
      relative: '/mnt/user-data/outputs/make/here\n',
    })
    // The microVM guest does the same (see the microVM case: relativeCwd).
  })

  it("reads create's timeoutMs as the default exec timeout, never as the sandbox's lifetime", () => {
    expect(report.timeoutMs).toEqual({
      aliveAfter: 'still here',
      defaultTimedOut: true,
      defaultSignal: 'SIGKILL',
    })
  })

  it('reports busy while a command runs, and kills an aborted command', () => {
    expect(report.busy).toEqual({ during: 'busy', after: 'ready' })
    expect(report.abort).toMatchObject({ signal: 'SIGKILL' })
  })

  it('moves files as Buffers through a seed-shaped layout, skills with dots and their own paths', () => {
    expect(report.files).toEqual({
      text: '# Report\nmade by the host\n',
      bytes: [0, 1, 2, 255],
      upload: 'a,b\n1,2\n',
      entries: [
        ['/mnt/user-data/outputs/build/objects/out.txt', 6],
        ['/mnt/user-data/outputs/data.bin', 4],
        ['/mnt/user-data/outputs/notes/report.md', 26],
      ],
      onHost: '# Report\nmade by the host\n',
    })
    expect(report.skills).toEqual({ stdout: '# pdf tools\n# custom\n', exitCode: 0 })
  })

  it('keeps deny-all a real boundary, and says so when asked to change it', () => {
    expect(report.denyAll.exitCode).not.toBe(0)
    expect(report.setNetworkPolicy).toMatchObject({
      name: 'SandboxControlRefusedError',
      control: 'setNetworkPolicy',
    })
    expect(report.destroyed).toBe('destroyed')
    expect(report.runsc).toBe('under gvisor\n')
  })

  it('enforces a static allowlist through the gateway without any set-up', () => {
    expect(report.staticEgress.exitCode).not.toBe(0)
    expect(report.staticEgress.stderr).toContain('403')
    expect(report.staticEgress.proxy).toBe('HTTP_PROXY=http://127.0.0.1:3128')
    // The agent in the sandbox learns from the refusal which host it may not reach.
    expect(report.staticEgress.refusalBody).toBe(
      'egress denied for example.com:80: host-not-allowed\n',
    )
  })

  it('refuses what it cannot honour with typed errors naming the field and the fix', () => {
    const refusals = report.refusals
    expect(refusals.hostReachability).toMatchObject({
      name: 'SandboxControlRefusedError',
      control: 'hostReachability',
    })
    expect(refusals.network).toMatchObject({
      name: 'SandboxControlRefusedError',
      control: 'network',
    })
    expect(refusals.network.message).toContain('egress policy')
    expect(refusals.inventedTier).toMatchObject({
      name: 'SandboxBackendNotImplementedError',
      backend: 'process',
    })
    expect(refusals.badLayout.name).toBe('ContainerSandboxLayoutValidationError')
    expect(refusals.badLayout.reasons.length).toBeGreaterThanOrEqual(3)
    expect(refusals.badLayout.message).toMatch(/^Invalid ContainerSandboxLayout: /)
  })

  it("throws the reference's layout error from createSandboxProvider, every reason in one pass", () => {
    const { threeInOnePass, dots, sharedPath } = report.layoutErrors
    expect(threeInOnePass.caughtAs).toBe('ContainerSandboxLayoutValidationError')
    expect(threeInOnePass.reasons).toHaveLength(3)
    expect(threeInOnePass.reasons[0]).toMatch(/^outputs: missing/)
    expect(threeInOnePass.reasons[1]).toContain('skill id "foo..bar"')
    expect(threeInOnePass.reasons[2]).toContain('duplicate skill id "pdf-tools"')
    expect(threeInOnePass.message).toBe(
      `Invalid ContainerSandboxLayout: ${threeInOnePass.reasons.join('; ')}`,
    )
    expect(dots.slice(0, 3).map((caught: { caughtAs?: string }) => caught.caughtAs)).toEqual([
      'ContainerSandboxLayoutValidationError',
      'ContainerSandboxLayoutValidationError',
      'ContainerSandboxLayoutValidationError',
    ])
    expect(dots[3]).toBe('accepted')
    expect(sharedPath.caughtAs).toBe('ContainerSandboxLayoutValidationError')
    expect(sharedPath.reasons.join('\n')).toContain('both mounted at "/work"')
  })

  it("serialises errors in the reference's envelope", () => {
    expect(report.layoutError.json).toEqual({
      name: 'ContainerSandboxLayoutValidationError',
      message: 'Invalid ContainerSandboxLayout: outputs: missing',
      reasons: ['outputs: missing'],
    })
    expect(report.layoutError.serialized).toMatchObject({
      name: 'ContainerSandboxLayoutValidationError',
      reasons: ['outputs: missing'],
      cause: { name: 'Symbol', message: 'Symbol(why)' },
    })
    expect(report.layoutError.functionCause).toEqual({ name: 'Function', message: '[function]' })
    expect(report.layoutError.notImplemented).toBe('container:lxc')
  })

  it("runs the reference's egress proxy and helpers", () => {
    expect(report.policies).toEqual(['deny-all', 'allow-all', 'static', 'resolver'])
    expect(report.allowlist).toEqual({
      sub: true,
      other: false,
      authority: { host: 'api.example.com', port: 8443 },
      bare: { host: 'api.example.com' },
    })
    expect(report.proxy.status).toBe('403')
    expect(report.proxy.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(report.proxy.denied).toEqual([['evil.example.net', 'host-not-allowed']])
    expect(report.proxy.body).toBe('egress denied for evil.example.net:80: host-not-allowed\n')
  })

  it('runs the microVM tier through an orchestrator, and refuses an unauthenticated agent transport', () => {
    expect(report.microvmProvider).toEqual({
      id: 'cordon-microvm-self-hosted',
      name: '@cordon/sandbox: microvm:self-hosted',
    })
    expect(report.microvm).toEqual({
      read: 'from the host',
      ran: 'from the host',
      environment: 'linux-namespace',
      relativeCwd: true,
    })
    // FirecrackerBackendInternalConfig has the reference's transport key, and
    // healthz() resolves with a boolean (agentIsUp type-checks only then).
    expect(report.microvmConfig).toContain('transport')
    expect(report.transportProbe).toBe('function')
    expect(report.transport).toMatchObject({ name: 'SandboxConfigValidationError' })
    expect(report.transport.message).toContain('authenticates every connection')
    expect(report.aciProvider).toEqual({
      id: 'cordon-container-aci-standby-pool',
      name: '@cordon/sandbox: container:aci-standby-pool',
    })
  })

  it('leaves nothing behind on the engine', async () => {
    const docker = new Dockerode()
    const containers = await docker.listContainers({
      all: true,
      filters: { label: [`${TEST_RUN_LABEL}=${RUN_LABEL}`, 'cordon.managed=1'] },
    })
    expect(containers.map((container) => container.Names[0])).toEqual([])
  })
})
