/**
 * A host program written against `@namzu/sandbox` 2.0.1 and `@namzu/sdk`,
 * from their doc comments, the way a namzu user writes one. The switch test
 * changes nothing here but the two import specifiers, type-checks the result
 * strictly against cordon's built packages and runs it against the real
 * engine. It prints one JSON report of what it observed.
 *
 * Inputs (environment): HOST_IMAGE (a busybox image), ORCHESTRATOR_URL and
 * ORCHESTRATOR_TOKEN (a microVM control plane), RUN_LABEL (a label value for
 * the test run's leftover check).
 */
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  type ACIStandbyPoolBackendConfig,
  type AgentSnapshotRef,
  type BrokeredCredential,
  type ContainerBackendConfig,
  type ContainerSandboxLayout,
  type ContainerSandboxLayoutMount,
  ContainerSandboxLayoutValidationError,
  type ContainerSandboxMountSource,
  type ContainerSandboxSkillMount,
  createSandboxProvider,
  type EgressPolicy,
  EgressProxy,
  type EgressProxyOptions,
  type FirecrackerBackendInternalConfig,
  isHostAllowed,
  type MicroVMBackendConfig,
  type OrchestratorTokenProvider,
  type ResolvedContainerSandboxLayout,
  type RunningEgressProxy,
  SANDBOX_DEFAULT_OUTPUTS_PATH,
  SANDBOX_DEFAULT_SKILLS_PARENT,
  SANDBOX_DEFAULT_TOOL_RESULTS_PATH,
  SANDBOX_DEFAULT_TRANSCRIPTS_PATH,
  SANDBOX_DEFAULT_UPLOADS_PATH,
  type SandboxAgentHandle,
  type SandboxBackend,
  type SandboxBackendConfig,
  SandboxBackendNotImplementedError,
  type SandboxBackendOptions,
  type SandboxProviderConfig,
  type SandboxTier,
  type SerializedSandboxError,
  serializeSandboxError,
  splitAuthority,
  VsockAgentTransport,
  type VsockTransportOptions,
} from '@namzu/sandbox'
import {
  SANDBOX_DEFAULT_MAX_PROCESSES,
  SANDBOX_DEFAULT_MEMORY_LIMIT_MB,
  SANDBOX_DEFAULT_SCRATCH_PATH,
  SANDBOX_DEFAULT_TIMEOUT_MS,
  SANDBOX_MAX_OUTPUT_BYTES,
  type Sandbox,
  type SandboxCreateConfig,
  type SandboxEnvironment,
  type SandboxExecOptions,
  type SandboxExecResult,
  type SandboxFileEntry,
  type SandboxId,
  type SandboxNetworkPolicy,
  type SandboxProvider,
  type SandboxStatus,
} from '@namzu/sdk'

const report: Record<string, unknown> = {}
const note = (key: string, value: unknown): void => {
  report[key] = value
}

/** What a thrown error looked like, through the reference's serializer. */
function caught(run: () => unknown): SerializedSandboxError | undefined {
  try {
    run()
  } catch (error) {
    return serializeSandboxError(error)
  }
  return undefined
}

async function caughtAsync(
  run: () => Promise<unknown>,
): Promise<SerializedSandboxError | undefined> {
  try {
    await run()
  } catch (error) {
    return serializeSandboxError(error)
  }
  return undefined
}

function describeStatus(status: SandboxStatus): string {
  switch (status) {
    case 'creating':
    case 'ready':
    case 'busy':
    case 'destroyed':
      return status
    default: {
      const exhaustive: never = status
      return exhaustive
    }
  }
}

function describeEnvironment(environment: SandboxEnvironment): string {
  switch (environment) {
    case 'linux-namespace':
    case 'macos-seatbelt':
    case 'basic':
      return environment
    default: {
      const exhaustive: never = environment
      return exhaustive
    }
  }
}

/** A readiness probe of the reference's shape: healthz() resolves with whether the agent is up. */
async function agentIsUp(transport: VsockAgentTransport): Promise<boolean> {
  const healthy: boolean = await transport.healthz()
  return healthy
}

/** A prompt generator reads the resolved layout to tell the model where things are. */
function promptFor(layout: ResolvedContainerSandboxLayout): string {
  const lines = [`Write deliverables to ${layout.outputs.containerPath}.`]
  if (layout.uploads) lines.push(`Read the user's files in ${layout.uploads.containerPath}.`)
  if (layout.scratch) lines.push(`Use ${layout.scratch.containerPath} for scratch work.`)
  for (const skill of layout.skills ?? []) lines.push(`Skill ${skill.id}: ${skill.containerPath}`)
  return lines.join('\n')
}

async function main(): Promise<void> {
  const image = process.env.HOST_IMAGE ?? 'busybox:latest'
  const runLabel = process.env.RUN_LABEL ?? 'namzu-host'
  note('constants', {
    timeout: SANDBOX_DEFAULT_TIMEOUT_MS,
    memory: SANDBOX_DEFAULT_MEMORY_LIMIT_MB,
    processes: SANDBOX_DEFAULT_MAX_PROCESSES,
    output: SANDBOX_MAX_OUTPUT_BYTES,
    paths: [
      SANDBOX_DEFAULT_OUTPUTS_PATH,
      SANDBOX_DEFAULT_UPLOADS_PATH,
      SANDBOX_DEFAULT_SCRATCH_PATH,
      SANDBOX_DEFAULT_TOOL_RESULTS_PATH,
      SANDBOX_DEFAULT_TRANSCRIPTS_PATH,
      SANDBOX_DEFAULT_SKILLS_PARENT,
    ],
  })

  // ---- the task's directories on this host, as a namzu host prepares them
  const task = await mkdtemp(join(tmpdir(), 'namzu-task-'))
  const dirs = {
    outputs: join(task, 'outputs'),
    uploads: join(task, 'uploads'),
    toolResults: join(task, 'tool_results'),
    transcripts: join(task, 'transcripts'),
    pdfSkill: join(task, 'skill-pdf'),
    customSkill: join(task, 'skill-custom'),
  }
  for (const dir of Object.values(dirs)) await mkdir(dir, { recursive: true })
  await chmod(task, 0o755)
  for (const dir of Object.values(dirs)) await chmod(dir, 0o755)
  // The container's user must be able to write the outputs.
  await chmod(dirs.outputs, 0o777)
  await writeFile(join(dirs.uploads, 'input.csv'), 'a,b\n1,2\n')
  await writeFile(join(dirs.pdfSkill, 'SKILL.md'), '# pdf tools\n')
  await writeFile(join(dirs.customSkill, 'SKILL.md'), '# custom\n')

  const hostDir = (hostPath: string): ContainerSandboxMountSource => ({ type: 'hostDir', hostPath })
  const outputs: ContainerSandboxLayoutMount = { source: hostDir(dirs.outputs) }
  const skills: ContainerSandboxSkillMount[] = [
    { id: 'pdf-tools.v2', source: hostDir(dirs.pdfSkill) },
    { id: 'custom', source: hostDir(dirs.customSkill), containerPath: '/opt/skills/custom' },
  ]
  const layout: ContainerSandboxLayout = {
    outputs,
    uploads: { source: hostDir(dirs.uploads) },
    toolResults: { source: hostDir(dirs.toolResults) },
    transcripts: { source: hostDir(dirs.transcripts), containerPath: '/mnt/transcripts' },
    skills,
  }

  // ---- a Docker provider, configured as the reference documents
  const docker: ContainerBackendConfig = {
    tier: 'container',
    runtime: 'docker',
    image,
    labels: { 'namzu.sandbox': 'true', 'cordon-test.run': runLabel },
  }
  const config: SandboxProviderConfig = {
    backend: docker,
    layout,
    defaultEgress: { kind: 'deny-all' },
    defaultTimeoutMs: 20_000,
    defaultMemoryLimitMb: 256,
    defaultMaxProcesses: 64,
  }
  const provider: SandboxProvider = createSandboxProvider(config)
  note('provider', {
    id: provider.id,
    name: provider.name,
    environment: describeEnvironment(provider.environment),
  })

  // The SDK passes its run config's timeoutMs into every create(); the task
  // works in a directory of its own under the outputs, which nobody made yet.
  const createConfig: SandboxCreateConfig = {
    workingDirectory: `${SANDBOX_DEFAULT_OUTPUTS_PATH}/task-42`,
    env: { TASK_ID: 'task-42' },
    timeoutMs: 1_500,
    memoryLimitMb: 256,
    maxProcesses: 64,
  }
  const sandbox: Sandbox = await provider.create(createConfig)
  const id: SandboxId = sandbox.id
  note('sandbox', {
    id,
    status: describeStatus(sandbox.status),
    environment: describeEnvironment(sandbox.environment),
    rootDir: sandbox.rootDir,
  })

  try {
    const options: SandboxExecOptions = { timeout: 10_000, env: { GREETING: 'hello' }, cwd: '/tmp' }
    const result: SandboxExecResult = await sandbox.exec(
      'sh',
      ['-c', 'echo "$GREETING $TASK_ID"; pwd; id -u; echo oops >&2; exit 3'],
      options,
    )
    note('exec', {
      exitCode: result.exitCode,
      stdout: result.stdout,
      stderr: result.stderr,
      signalPresent: 'signal' in result,
      signal: result.signal ?? null,
      timedOut: result.timedOut,
      durationIsNumber: typeof result.durationMs === 'number',
      stdoutTruncated: result.stdoutTruncated ?? null,
    })

    // Commands without a cwd run in the working directory; a relative cwd is
    // the workspace's, and is made (mkdir -p) when it is missing.
    const inWorkingDirectory = await sandbox.exec('pwd')
    const relative = await sandbox.exec('sh', ['-c', 'pwd; echo built > out.txt'], {
      cwd: 'build/objects',
    })
    const relativeAgain = await sandbox.exec('cat', ['out.txt'], { cwd: './build/objects' })
    note('cwd', {
      workingDirectory: inWorkingDirectory.stdout,
      relative: relative.stdout,
      relativeExit: relative.exitCode,
      relativeAgain: relativeAgain.stdout,
    })

    // timeoutMs given to create() is the default per-exec timeout, not a lifetime.
    await new Promise((resolve) => setTimeout(resolve, 2_000))
    const afterTimeoutMs = await sandbox.exec('echo', ['still here'])
    const defaulted = await sandbox.exec('sleep', ['20'])
    note('timeoutMs', {
      aliveAfter: afterTimeoutMs.stdout.trim(),
      defaultTimedOut: defaulted.timedOut,
      defaultSignal: defaulted.signal ?? null,
    })

    const running = sandbox.exec('sleep', ['1'])
    await new Promise((resolve) => setTimeout(resolve, 300))
    const busy = describeStatus(sandbox.status)
    await running
    note('busy', { during: busy, after: describeStatus(sandbox.status) })

    const controller = new AbortController()
    const abortable = sandbox.exec('sleep', ['30'], { timeout: 60_000, signal: controller.signal })
    setTimeout(() => controller.abort(), 300)
    const aborted = await abortable
    note('abort', { signal: aborted.signal ?? null, exitCode: aborted.exitCode })

    await sandbox.writeFile('notes/report.md', '# Report\nmade by the host\n')
    await sandbox.writeFile(`${sandbox.rootDir}/data.bin`, Buffer.from([0, 1, 2, 255]))
    const text: Buffer = await sandbox.readFile('notes/report.md')
    const upload: Buffer = await sandbox.readFile(`${SANDBOX_DEFAULT_UPLOADS_PATH}/input.csv`)
    const entries: readonly SandboxFileEntry[] = await sandbox.listFiles(sandbox.rootDir)
    const onHost = await readFile(join(dirs.outputs, 'notes/report.md'), 'utf8')
    note('files', {
      text: text.toString('utf8'),
      bytes: [...(await sandbox.readFile('data.bin'))],
      upload: upload.toString('utf8'),
      entries: entries.map((entry) => [entry.path, entry.size]).sort(),
      onHost,
    })

    const skillsSeen = await sandbox.exec('cat', [
      `${SANDBOX_DEFAULT_SKILLS_PARENT}/pdf-tools.v2/SKILL.md`,
      '/opt/skills/custom/SKILL.md',
    ])
    note('skills', { stdout: skillsSeen.stdout, exitCode: skillsSeen.exitCode })

    const policy: SandboxNetworkPolicy = { allowedHosts: ['example.com'] }
    note(
      'setNetworkPolicy',
      sandbox.setNetworkPolicy
        ? await caughtAsync(() => sandbox.setNetworkPolicy!(policy))
        : 'absent',
    )
    const network = await sandbox.exec('wget', ['-q', '-T', '3', '-O', '-', 'http://example.com/'])
    note('denyAll', { exitCode: network.exitCode })
  } finally {
    await sandbox.destroy()
    await sandbox.destroy()
    note('destroyed', describeStatus(sandbox.status))
  }

  // ---- gVisor, the reference's other container runtime
  const gvisor = createSandboxProvider({
    backend: {
      tier: 'container',
      runtime: 'runsc',
      image,
      labels: { 'cordon-test.run': runLabel },
    },
    layout: { outputs: { source: { type: 'hostDir', hostPath: dirs.outputs } }, skills: [] },
  })
  const underGvisor = await gvisor.create({ workingDirectory: 'gvisor-task' })
  try {
    note('runsc', (await underGvisor.exec('echo', ['under gvisor'])).stdout)
    note('runscCwd', {
      workingDirectory: (await underGvisor.exec('pwd')).stdout,
      relative: (await underGvisor.exec('pwd', [], { cwd: 'make/here' })).stdout,
    })
  } finally {
    await underGvisor.destroy()
  }

  // ---- a static allowlist: enforced by cordon's egress gateway, no set-up needed
  const proxied = createSandboxProvider({
    backend: docker,
    layout,
    defaultEgress: { kind: 'static', allowedHosts: ['pypi.org'] },
  })
  const behindGateway = await proxied.create()
  try {
    const refused = await behindGateway.exec('wget', ['-q', '-O', '-', 'http://example.com/'])
    const env = await behindGateway.exec('env')
    // What an agent in the sandbox reads when its proxy refuses it.
    const refusal = await behindGateway.exec('sh', [
      '-c',
      "printf 'GET http://example.com/ HTTP/1.1\\r\\nHost: example.com\\r\\nConnection: close\\r\\n\\r\\n' | nc 127.0.0.1 3128",
    ])
    note('staticEgress', {
      exitCode: refused.exitCode,
      stderr: refused.stderr,
      proxy: env.stdout.split('\n').find((line) => line.startsWith('HTTP_PROXY=')),
      refusalBody: refusal.stdout.split('\r\n\r\n')[1] ?? refusal.stdout,
    })
  } finally {
    await behindGateway.destroy()
  }

  // ---- what cordon refuses, with a typed error, instead of ignoring
  const refusals: Record<string, SerializedSandboxError | undefined> = {
    hostReachability: caught(() =>
      createSandboxProvider({
        backend: { ...docker, hostReachability: 'container-network' },
        layout,
      }),
    ),
    network: caught(() =>
      createSandboxProvider({ backend: { ...docker, network: 'bridge' }, layout }),
    ),
    inventedTier: caught(() =>
      createSandboxProvider({
        backend: { tier: 'process' },
        layout,
      } as unknown as SandboxProviderConfig),
    ),
    badLayout: caught(() =>
      createSandboxProvider({
        backend: docker,
        layout: {
          outputs: { source: { type: 'hostDir', hostPath: 'relative' }, containerPath: 'x' },
          skills: [{ id: '../up', source: { type: 'inImage' } }],
        },
      }),
    ),
  }
  note('refusals', refusals)

  // A host catches the reference's layout error by its class, and fixes every reason at once.
  const layoutProblems = (layout: ContainerSandboxLayout): unknown => {
    try {
      createSandboxProvider({ backend: docker, layout })
      return 'accepted'
    } catch (error) {
      if (error instanceof ContainerSandboxLayoutValidationError)
        return { caughtAs: error.name, reasons: error.reasons, message: error.message }
      return { notALayoutError: serializeSandboxError(error) }
    }
  }
  note('layoutErrors', {
    threeInOnePass: layoutProblems({
      skills: [
        { id: 'pdf-tools', source: { type: 'inImage' } },
        { id: 'foo..bar', source: { type: 'inImage' } },
        { id: 'pdf-tools', source: { type: 'inImage' } },
      ],
    } as unknown as ContainerSandboxLayout),
    // (A host directory as the source: the Docker backends refuse `inImage`, which they cannot mount.)
    dots: ['foo..bar', '..foo', 'foo..', 'pdf-tools.v2'].map((skillId) =>
      layoutProblems({ outputs, skills: [{ id: skillId, source: hostDir(dirs.pdfSkill) }] }),
    ),
    sharedPath: layoutProblems({
      outputs: { source: outputs.source, containerPath: '/work' },
      scratch: { source: { type: 'hostDir', hostPath: dirs.uploads }, containerPath: '/work' },
    }),
  })
  const layoutError = new ContainerSandboxLayoutValidationError(['outputs: missing'], {
    cause: Symbol('why'),
  })
  const retry = (): void => {}
  note('layoutError', {
    json: JSON.parse(JSON.stringify(layoutError)),
    serialized: serializeSandboxError(layoutError),
    functionCause: serializeSandboxError(
      new ContainerSandboxLayoutValidationError(['outputs: missing'], { cause: retry }),
    ).cause,
    notImplemented: new SandboxBackendNotImplementedError('container:lxc').backend,
  })

  // ---- every egress kind, as values and through the standalone proxy
  const policies: EgressPolicy[] = [
    { kind: 'deny-all' },
    { kind: 'allow-all' },
    { kind: 'static', allowedHosts: ['api.example.com', '.pypi.org'] },
    { kind: 'resolver', resolve: async () => ['api.example.com'] },
  ]
  note(
    'policies',
    policies.map((policy) => policy.kind),
  )
  note('allowlist', {
    sub: isHostAllowed('files.pypi.org', ['.pypi.org']),
    other: isHostAllowed('evil.com', ['.pypi.org']),
    authority: splitAuthority('api.example.com:8443'),
    bare: splitAuthority('api.example.com'),
  })
  const denied: Array<[string, string]> = []
  const credentials: BrokeredCredential[] = [
    { host: 'api.example.com', header: 'authorization', value: 'Bearer real-secret' },
  ]
  const proxyOptions: EgressProxyOptions = {
    allowedHosts: async () => ['api.example.com'],
    credentials,
    upgradeToHttps: true,
    onDenied: (host, reason) => denied.push([host, reason]),
  }
  const proxy = new EgressProxy(proxyOptions)
  const running: RunningEgressProxy = await proxy.listen(0)
  const answer = await new Promise<string>((resolve) => {
    const socket = connect(running.port, '127.0.0.1')
    let text = ''
    socket.on('data', (chunk) => {
      text += chunk.toString()
    })
    socket.on('close', () => resolve(text))
    socket.on('error', () => resolve(text))
    socket.write(
      'GET http://evil.example.net/ HTTP/1.1\r\nHost: evil.example.net\r\nConnection: close\r\n\r\n',
    )
  })
  running.setAllowedHosts(async () => [])
  await running.close()
  note('proxy', {
    url: running.url,
    status: answer.split(' ')[1],
    body: answer.split('\r\n\r\n')[1],
    denied,
  })

  // ---- the microVM tier (and its agent transport)
  const getToken: OrchestratorTokenProvider = async () => process.env.ORCHESTRATOR_TOKEN ?? 'token'
  const snapshot: AgentSnapshotRef = { orgId: 'org', agentId: 'agent', version: '1' }
  const microvm: MicroVMBackendConfig = {
    tier: 'microvm',
    service: 'self-hosted',
    orchestratorEndpoint: process.env.ORCHESTRATOR_URL ?? 'http://127.0.0.1:1',
    getToken,
    readyTimeoutMs: 60_000,
    readyPollIntervalMs: 100,
  }
  const transportOptions: VsockTransportOptions = {
    connectTimeoutMs: 1_000,
    readIdleTimeoutMs: 60_000,
  }
  const internal: FirecrackerBackendInternalConfig = {
    orchestratorEndpoint: microvm.orchestratorEndpoint,
    getToken,
    agentSnapshot: snapshot,
    mtls: { ca: Buffer.from('ca'), cert: Buffer.from('cert'), key: Buffer.from('key') },
    transport: transportOptions,
  }
  note('microvmConfig', Object.keys(internal).sort())
  const vmProvider = createSandboxProvider({ backend: microvm, defaultTimeoutMs: 20_000 })
  note('microvmProvider', { id: vmProvider.id, name: vmProvider.name })
  if (process.env.ORCHESTRATOR_URL) {
    const guest = await vmProvider.create({ timeoutMs: 10_000 })
    try {
      await guest.writeFile('hello.txt', 'from the host')
      const read = await guest.readFile('hello.txt')
      const ran = await guest.exec('cat', [`${guest.rootDir}/hello.txt`])
      const relative = await guest.exec('pwd', [], { cwd: 'vm-build' })
      note('microvm', {
        read: read.toString('utf8'),
        ran: ran.stdout,
        environment: guest.environment,
        relativeCwd: relative.stdout.trim() === `${guest.rootDir}/vm-build`,
      })
    } finally {
      await guest.destroy()
    }
  }
  const handle: SandboxAgentHandle = { kind: 'vsock', udsPath: '/run/fc/v.sock', port: 1024 }
  note(
    'transport',
    caught(() => new VsockAgentTransport(handle, transportOptions)),
  )
  note('transportProbe', typeof agentIsUp)

  // ---- the ACI standby pool tier: a provider is built without any request to Azure
  const aci: ACIStandbyPoolBackendConfig = {
    tier: 'container',
    runtime: 'aci-standby-pool',
    subscriptionId: 'sub',
    resourceGroup: 'rg',
    location: 'westeurope',
    standbyPoolResourceId:
      '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.StandbyPool/standbyContainerGroupPools/pool',
    containerGroupProfileResourceId:
      '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.ContainerInstance/containerGroupProfiles/profile',
    containerGroupProfileRevision: 1,
    getArmToken: async () => 'arm-token',
    subnetId:
      '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/sandboxes',
    readyPollIntervalMs: 500,
    readyTimeoutMs: 60_000,
    workerPort: 2024,
    armApiVersion: '2024-05-01-preview',
    containerNamePrefix: 'namzu-task',
  }
  const aciProvider = createSandboxProvider({
    backend: aci,
    layout: { outputs: { source: { type: 'inImage' } } },
  })
  note('aciProvider', { id: aciProvider.id, name: aciProvider.name })

  // ---- the backend contract as a type a host may name
  const tier: SandboxTier = 'container'
  const backendConfigs: SandboxBackendConfig[] = [docker, aci, microvm]
  const describeBackend = (backend: SandboxBackend, options: SandboxBackendOptions): string =>
    `${backend.tier}/${backend.name} at ${options.workingDirectory}`
  note('contract', { tier, configs: backendConfigs.length, describe: typeof describeBackend })
  note(
    'prompt',
    promptFor({
      outputs: { source: outputs.source, containerPath: SANDBOX_DEFAULT_OUTPUTS_PATH },
      skills: [
        {
          id: 'pdf-tools.v2',
          source: skills[0]!.source,
          containerPath: '/mnt/skills/pdf-tools.v2',
        },
      ],
    }),
  )

  await rm(task, { recursive: true, force: true })
  process.stdout.write(`${JSON.stringify(report)}\n`)
}

main().catch((error: unknown) => {
  process.stdout.write(`${JSON.stringify({ ...report, failure: serializeSandboxError(error) })}\n`)
  process.exitCode = 1
})
