import {
  ContainerSandboxLayoutValidationError,
  type SandboxBackendConfigBase,
  type SandboxBackendDefinition,
  SandboxBackendNotImplementedError,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxProviderConfigFor,
} from '@cordon/core'
import {
  parseBackendConfig as parseWith,
  prepareProviderConfig as prepareWith,
  selectBackend,
} from '@cordon/core/backend'
import { describe, expect, it } from 'vitest'
import {
  builtinBackends,
  type SandboxBackendConfig,
  type SandboxProviderConfig,
} from '../src/index.js'

// The built-in definitions, as the umbrella passes them; no package is loaded.
const BUILTINS = Object.values(
  builtinBackends(async () => ({})),
) as unknown as SandboxBackendDefinition[]
const prepareProviderConfig = (input: SandboxProviderConfig) =>
  prepareWith(input as SandboxProviderConfigFor<SandboxBackendConfigBase>, BUILTINS)
const backendNameOf = (backend: unknown) => selectBackend(backend, BUILTINS).name
const parseBackendConfig = <Config extends SandboxBackendConfig>(input: Config): Config =>
  parseWith(selectBackend(input, BUILTINS), input) as Config

const layout = { outputs: { source: { type: 'ephemeral' as const } } }

function issuesOf(run: () => unknown): string[] {
  try {
    run()
  } catch (error) {
    if (SandboxConfigValidationError.isInstance(error))
      return error.issues.map((issue) => `${issue.path}: ${issue.message}`)
    throw error
  }
  throw new Error('expected a validation error')
}

describe('prepareProviderConfig', () => {
  it('accepts a minimal container config and resolves the layout', () => {
    const prepared = prepareProviderConfig({
      backend: { tier: 'container', image: 'busybox' },
      layout,
    })
    expect(prepared.definition.name).toBe('container:docker')
    expect(prepared.layout?.outputs.containerPath).toBe('/mnt/user-data/outputs')
  })

  it('names each backend by tier and runtime', () => {
    expect(backendNameOf({ tier: 'container', runtime: 'runsc' })).toBe('container:runsc')
    // runc is the Docker backend's default runtime, by its own name.
    expect(backendNameOf({ tier: 'container', runtime: 'runc' })).toBe('container:docker')
    expect(backendNameOf({ tier: 'container', runtime: 'docker' })).toBe('container:docker')
    expect(
      prepareProviderConfig({ backend: { tier: 'container', runtime: 'runc', image: 'x' }, layout })
        .config.backend,
    ).toMatchObject({ runtime: 'runc' })
    expect(backendNameOf({ tier: 'container', runtime: 'aci-standby-pool' })).toBe(
      'container:aci-standby-pool',
    )
    expect(backendNameOf({ tier: 'microvm', service: 'self-hosted' })).toBe('microvm:self-hosted')
  })

  it('raises not-implemented for an unknown tier, runtime or service from untyped callers', () => {
    const untyped = (backend: unknown) => () =>
      prepareProviderConfig({ backend, layout } as unknown as SandboxProviderConfig)
    expect(untyped({ tier: 'process' })).toThrow(SandboxBackendNotImplementedError)
    expect(untyped({ tier: 'passthrough' })).toThrow(SandboxBackendNotImplementedError)
    expect(untyped({ tier: 'container', runtime: 'lxc', image: 'x' })).toThrow(/container:lxc/)
    expect(untyped({ tier: 'microvm', service: 'e2b' })).toThrow(/microvm:e2b/)
  })

  it('reports every problem of a container config at once', () => {
    const issues = issuesOf(() =>
      prepareProviderConfig({
        backend: {
          tier: 'container',
          image: '',
          user: '0:0',
          socketPath: '/x',
          host: 'h',
          labels: { 'cordon.owner': 'me' },
        },
        layout: { outputs: { source: { type: 'ephemeral' }, noexec: 1 } },
        defaultMemoryLimitMb: -1,
        defaultEgress: {
          kind: 'static',
          allowedHosts: ['ok.example.com', 'bad host', '*.example.com'],
        },
      } as unknown as SandboxProviderConfig),
    )
    const text = issues.join('\n')
    expect(text).toContain('backend.image')
    expect(text).toContain('root is refused')
    expect(text).toContain('either socketPath or host')
    expect(text).toContain('reserved')
    expect(text).toContain('defaultMemoryLimitMb')
    expect(text).toContain('layout.outputs.noexec')
    expect(text).toContain('defaultEgress.allowedHosts.1')
    expect(text).toContain('defaultEgress.allowedHosts.2')
  })

  it('refuses an image name the engine cannot parse, naming backend.image and why', () => {
    for (const image of [
      'cordon-test/busybox:latest',
      'node:20-slim',
      'busybox',
      'localhost:5000/team/tool:1',
      'Registry.Example.com:5000/team/tool:1.0_rc-2',
      'ghcr.io/team/tool@sha256:'.concat('a'.repeat(64)),
      'a__b/c--d',
    ]) {
      expect(() => parseBackendConfig({ tier: 'container', image }), image).not.toThrow()
    }
    for (const [image, why] of [
      ['bad image!', /"bad image!" is not an image reference the engine accepts/],
      ['Cordon-Test/BusyBox:latest', /the repository name must be lowercase/],
      ['team//tool', /not an image reference/],
      ['tool:', /not an image reference/],
      ['-tool', /not an image reference/],
      ['tool:1@sha256:short', /not an image reference/],
      ['a'.repeat(256), /longer than 255 characters/],
    ] as const) {
      const issues = issuesOf(() =>
        prepareProviderConfig({ backend: { tier: 'container', image }, layout }),
      )
      expect(issues, image).toHaveLength(1)
      expect(issues[0], image).toMatch(/^backend\.image: /)
      expect(issues[0], image).toMatch(why)
    }
  })

  it('takes registry credentials by registry host, and reports every bad entry without its secret', () => {
    const good = parseBackendConfig({
      tier: 'container',
      image: 'ghcr.io/team/tool:1',
      registryAuth: {
        'ghcr.io': { username: 'bot', password: 'token-1' },
        'registry.example.com:5000': { username: 'bot', password: 'token-2' },
        'docker.io': { username: 'bot', password: 'token-3' },
      },
    })
    expect(Object.keys(good.registryAuth ?? {})).toHaveLength(3)
    let thrown: unknown
    try {
      parseBackendConfig({
        tier: 'container',
        image: 'busybox',
        registryAuth: {
          'https://index.docker.io/v1/': { username: 'bot', password: 'hunter2-secret' },
          'Docker.io': { username: 'bot', password: 'hunter2-secret' },
          'index.docker.io': { username: 'bot', password: 'hunter2-secret' },
          'ghcr.io': { username: '', password: 'hunter2-secret' },
          'quay.io': { username: 'bot', password: 'hunter2-secret', email: 'x' } as never,
        },
      })
    } catch (error) {
      thrown = error
    }
    expect(SandboxConfigValidationError.isInstance(thrown)).toBe(true)
    const issues = (thrown as SandboxConfigValidationError).issues.map(
      (issue) => `${issue.path}: ${issue.message}`,
    )
    expect(issues.sort()).toEqual([
      expect.stringMatching(/^registryAuth\.ghcr\.io\.username: /),
      expect.stringMatching(
        /^registryAuth\.https:\/\/index\.docker\.io\/v1\/: registry keys are hosts/,
      ),
      expect.stringMatching(
        /^registryAuth\.index\.docker\.io: names the same registry as "Docker\.io"/,
      ),
      expect.stringMatching(/^registryAuth\.quay\.io: Unrecognized key/),
    ])
    // Neither the message nor the issues carry a password.
    expect(JSON.stringify(thrown)).not.toContain('hunter2')
    expect((thrown as Error).message).not.toContain('hunter2')
  })

  it('takes tmpfsNoexec as a boolean only', () => {
    expect(
      issuesOf(() =>
        prepareProviderConfig({
          backend: { tier: 'container', image: 'x', tmpfsNoexec: 'yes' },
          layout,
        } as unknown as SandboxProviderConfig),
      ).join('\n'),
    ).toContain('tmpfsNoexec')
  })

  it('requires a layout for the container tier', () => {
    const issues = issuesOf(() =>
      prepareProviderConfig({
        backend: { tier: 'container', image: 'x' },
      } as unknown as SandboxProviderConfig),
    )
    expect(issues.join('\n')).toContain('layout')
  })

  it('requires orchestratorEndpoint and getToken for the microvm tier', () => {
    const issues = issuesOf(() =>
      prepareProviderConfig({
        backend: { tier: 'microvm', service: 'self-hosted' },
      } as unknown as SandboxProviderConfig),
    )
    expect(issues.some((issue) => issue.startsWith('backend.orchestratorEndpoint'))).toBe(true)
    expect(issues.some((issue) => issue.startsWith('backend.getToken'))).toBe(true)
  })

  it('refuses an ACI config with neither subnet nor public opt-in', () => {
    const base = {
      tier: 'container',
      runtime: 'aci-standby-pool',
      subscriptionId: 's',
      resourceGroup: 'rg',
      location: 'westeurope',
      standbyPoolResourceId: '/subscriptions/s/pool',
      containerGroupProfileResourceId: '/subscriptions/s/profile',
      getArmToken: async () => 't',
    } as const
    expect(issuesOf(() => parseBackendConfig(base)).join('\n')).toContain('allowPublicAddress')
    expect(parseBackendConfig({ ...base, allowPublicAddress: true })).toMatchObject({
      runtime: 'aci-standby-pool',
    })
  })

  it('rejects non-object configs with a validation error', () => {
    expect(() => prepareProviderConfig(null as unknown as SandboxProviderConfig)).toThrow(
      SandboxConfigValidationError,
    )
    expect(() => prepareProviderConfig({} as unknown as SandboxProviderConfig)).toThrow(
      SandboxConfigValidationError,
    )
  })

  it("refuses the reference's container fields that describe a network path, naming them", () => {
    const refusal = (backend: Record<string, unknown>) => {
      try {
        prepareProviderConfig({ backend, layout } as unknown as SandboxProviderConfig)
      } catch (error) {
        if (SandboxControlRefusedError.isInstance(error)) return error
        throw error
      }
      throw new Error('expected a refusal')
    }
    const reach = refusal({ tier: 'container', image: 'x', hostReachability: 'host-port' })
    expect(reach).toMatchObject({ control: 'hostReachability', backend: 'container:docker' })
    expect(reach.message).toContain('remove hostReachability')
    const bridge = refusal({ tier: 'container', runtime: 'runsc', image: 'x', network: 'bridge' })
    expect(bridge).toMatchObject({ control: 'network', backend: 'container:runsc' })
    expect(bridge.message).toContain('egress policy')
    expect(
      prepareProviderConfig({
        backend: { tier: 'container', image: 'x', network: 'none' },
        layout,
      }).definition.name,
    ).toBe('container:docker')
  })

  it('refuses unknown keys at every level, naming each', () => {
    const text = issuesOf(() =>
      prepareProviderConfig({
        backend: { tier: 'container', image: 'x', readyPollIntervalMs: 10, workerPort: 1 },
        layout: { outputs: { source: { type: 'ephemeral', size: 3 } }, extra: true },
        defaultLifetime: 5,
      } as unknown as SandboxProviderConfig),
    ).join('\n')
    for (const key of ['readyPollIntervalMs', 'workerPort', 'defaultLifetime']) {
      expect(text).toContain(key)
    }
    expect(() =>
      prepareProviderConfig({
        backend: { tier: 'container', image: 'x' },
        layout: { outputs: { source: { type: 'ephemeral', size: 3 } } },
      } as unknown as SandboxProviderConfig),
    ).toThrow(/size/)
  })

  it("accepts the reference's microVM and ACI fields, mTLS material as text or bytes", () => {
    const pem = Buffer.from('-----BEGIN CERTIFICATE-----\n')
    expect(
      parseBackendConfig({
        tier: 'microvm',
        service: 'self-hosted',
        orchestratorEndpoint: 'https://orchestrator.example/',
        getToken: async () => 't',
        readyTimeoutMs: 1000,
        readyPollIntervalMs: 50,
        mtls: { ca: pem, cert: pem, key: 'KEY' },
        controlPlaneMtls: { ca: 'CA', cert: pem, key: pem, servername: 'cp' },
      }),
    ).toMatchObject({ readyPollIntervalMs: 50 })
    expect(
      parseBackendConfig({
        tier: 'container',
        runtime: 'aci-standby-pool',
        subscriptionId: 's',
        resourceGroup: 'rg',
        location: 'westeurope',
        standbyPoolResourceId: '/subscriptions/s/pool',
        containerGroupProfileResourceId: '/subscriptions/s/profile',
        getArmToken: async () => 't',
        subnetId: '/subscriptions/s/subnet',
        workerPort: 2024,
        readyTimeoutMs: 60_000,
        readyPollIntervalMs: 500,
        containerNamePrefix: 'namzu-task',
      }),
    ).toMatchObject({ workerPort: 2024 })
  })

  it("reports a layout's problems as the reference did: one ContainerSandboxLayoutValidationError with every reason", () => {
    const backend = { tier: 'container', image: 'x' } as const
    const caught = (() => {
      try {
        prepareProviderConfig({
          backend,
          layout: {
            skills: [
              { id: '..foo', source: { type: 'inImage' } },
              { id: 'ok', source: { type: 'inImage' } },
              { id: 'ok', source: { type: 'inImage' } },
            ],
          },
        } as unknown as SandboxProviderConfig)
      } catch (error) {
        return error
      }
    })()
    expect(ContainerSandboxLayoutValidationError.isInstance(caught)).toBe(true)
    const error = caught as ContainerSandboxLayoutValidationError
    expect(error.name).toBe('ContainerSandboxLayoutValidationError')
    expect(error.reasons).toHaveLength(3)
    expect(error.reasons[0]).toMatch(/^outputs: missing/)
    expect(error.reasons[2]).toBe('skills.2.id: duplicate skill id "ok"')
    expect(error.message).toBe(`Invalid ContainerSandboxLayout: ${error.reasons.join('; ')}`)
    // Located in the provider config as structured issues.
    expect(error.issues.map((issue) => issue.path)).toEqual([
      'layout.outputs',
      'layout.skills.0.id',
      'layout.skills.2.id',
    ])
  })

  it('still names every other problem of the config when the layout has one', () => {
    let caught: unknown
    try {
      prepareProviderConfig({
        backend: { tier: 'container', image: '' },
        layout: { outputs: { source: { type: 'hostDir', hostPath: 'relative' } } },
        defaultTimeoutMs: -1,
      } as unknown as SandboxProviderConfig)
    } catch (error) {
      caught = error
    }
    expect(ContainerSandboxLayoutValidationError.isInstance(caught)).toBe(true)
    const error = caught as ContainerSandboxLayoutValidationError
    expect(error.reasons).toEqual([
      'outputs.source.hostPath: host directory "relative" must be an absolute path',
    ])
    const paths = error.issues.map((issue) => issue.path)
    expect(paths).toContain('layout.outputs.source.hostPath')
    expect(paths).toContain('backend.image')
    expect(paths).toContain('defaultTimeoutMs')
    expect(error.message).toMatch(/the rest of the config is invalid too: .*backend\.image/)
  })
})

describe('layout sources the Docker backends cannot mount', () => {
  it.each([
    ['container:docker', { tier: 'container', image: 'x' }],
    ['container:runsc', { tier: 'container', runtime: 'runsc', image: 'x' }],
  ] as const)(
    '%s refuses inImage and azureFileShare when the provider is made, naming the key and the kind',
    (name, backend) => {
      const refusal = (input: unknown) => {
        try {
          prepareProviderConfig({ backend, layout: input } as unknown as SandboxProviderConfig)
        } catch (error) {
          if (SandboxControlRefusedError.isInstance(error)) return error
          throw error
        }
        throw new Error('expected a refusal')
      }
      const inImage = refusal({ outputs: { source: { type: 'inImage' } } })
      expect(inImage).toMatchObject({ control: 'layout.outputs.source', backend: name })
      expect(inImage.message).toContain('inImage')
      const share = refusal({
        outputs: { source: { type: 'ephemeral' } },
        skills: [
          {
            id: 'docs',
            source: {
              type: 'azureFileShare',
              storageAccountName: 'a',
              shareName: 's',
              storageAccountKey: 'k',
            },
          },
        ],
      })
      expect(share).toMatchObject({ control: 'layout.skills.docs.source', backend: name })
      expect(share.message).toContain('Azure file shares')
    },
  )
})
