import {
  type ContainerSandboxLayout,
  type EgressPolicy,
  resolveLayout,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
} from '@cordon/core'
import { closeTestArmStandin, type TestArmStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createAciStandbyPoolBackend } from '../src/index.js'
import {
  createRequest,
  describeRequest,
  groupsGone,
  requestsSince,
  testBackend,
} from './backend-fixture.js'
import { backendConfig, startTestStandin, testProvider } from './standin-fixture.js'

const BACKEND = 'container:aci-standby-pool'

function expectRefusal(error: unknown, control: string): void {
  expect(SandboxControlRefusedError.isInstance(error), String(error)).toBe(true)
  expect(error).toMatchObject({ code: 'CONTROL_REFUSED', control, backend: BACKEND })
  expect((error as SandboxControlRefusedError).reason.length).toBeGreaterThan(20)
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection')
    },
    (error: unknown) => error,
  )
}

function caught(run: () => unknown): unknown {
  try {
    run()
  } catch (error) {
    return error
  }
  throw new Error('expected a throw')
}

describe('refusals', () => {
  let standin: TestArmStandin | undefined
  beforeAll(async () => {
    standin = await startTestStandin({ poolSize: 1 })
  })
  afterAll(() => closeTestArmStandin(standin))

  it('refuses allow-all, static and resolver egress before asking Azure for anything', async () => {
    const policies: EgressPolicy[] = [
      { kind: 'allow-all' },
      { kind: 'static', allowedHosts: ['api.example.com'] },
      { kind: 'resolver', resolve: async () => ['api.example.com'] },
    ]
    const { backend } = testBackend(standin!)
    const mark = standin!.requests().length
    for (const egress of policies) {
      expectRefusal(
        await rejectionOf(backend.create(createRequest(standin!, { egress }))),
        `egress.${egress.kind}`,
      )
    }
    await backend.close()
    expect(requestsSince(standin!, mark)).toEqual([])
  })

  it('refuses every egress policy for groups with a public address, even deny-all', async () => {
    const { backend } = testBackend(standin!, { subnetId: undefined, allowPublicAddress: true })
    const mark = standin!.requests().length
    expectRefusal(await rejectionOf(backend.create(createRequest(standin!))), 'egress.deny-all')
    await backend.close()
    expect(requestsSince(standin!, mark)).toEqual([])
  })

  it('will not construct without a subnet unless a public address is opted into', () => {
    const error = caught(() => testBackend(standin!, { subnetId: undefined }))
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    expect((error as SandboxConfigValidationError).issues).toContainEqual(
      expect.objectContaining({ path: 'subnetId' }),
    )
  })

  it("refuses any memory or process limit, the profile's own included: a claim cannot set one", async () => {
    const { backend } = testBackend(standin!)
    const { memoryMb, maxProcesses } = standin!.profile
    const mark = standin!.requests().length
    for (const memoryLimitMb of [memoryMb * 2, memoryMb]) {
      expectRefusal(
        await rejectionOf(backend.create(createRequest(standin!, { memoryLimitMb }))),
        'memoryLimitMb',
      )
    }
    expectRefusal(
      await rejectionOf(backend.create(createRequest(standin!, { maxProcesses }))),
      'maxProcesses',
    )
    // Refused before any request to Azure.
    expect(requestsSince(standin!, mark)).toEqual([])
    await backend.close()
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('through a provider, refuses default limits when the provider is built', () => {
    expectRefusal(
      caught(() => testProvider(standin!, { provider: { defaultMemoryLimitMb: 512 } })),
      'defaultMemoryLimitMb',
    )
    expectRefusal(
      caught(() => testProvider(standin!, { provider: { defaultMaxProcesses: 256 } })),
      'defaultMaxProcesses',
    )
  })

  it('refuses layout sources a claim cannot mount, at construction', () => {
    const layouts: Array<[ContainerSandboxLayout, string]> = [
      [
        { outputs: { source: { type: 'hostDir', hostPath: '/srv/outputs' } } },
        'layout.outputs.hostDir',
      ],
      [{ outputs: { source: { type: 'ephemeral' } } }, 'layout.outputs.ephemeral'],
      [
        {
          outputs: { source: { type: 'inImage' } },
          skills: [{ id: 'pdf', source: { type: 'ephemeral', sizeMb: 10 } }],
        },
        'layout.skills.pdf.ephemeral',
      ],
      [{ outputs: { source: { type: 'inImage' }, noexec: true } }, 'layout.outputs.noexec'],
    ]
    for (const [layout, control] of layouts) {
      expectRefusal(
        caught(() => testBackend(standin!, {}, { layout: resolveLayout(layout) })),
        control,
      )
    }
  })

  it('refuses an Azure file share the profile does not mount, before claiming', async () => {
    const layout = resolveLayout({
      outputs: { source: { type: 'inImage' } },
      uploads: {
        source: {
          type: 'azureFileShare',
          storageAccountName: 'cordondata',
          shareName: 'uploads',
          storageAccountKey: 'not-used-by-a-claim',
        },
      },
    })
    const { backend } = testBackend(standin!, {}, { layout })
    const mark = standin!.requests().length
    expectRefusal(
      await rejectionOf(backend.create(createRequest(standin!))),
      'layout.uploads.azureFileShare',
    )
    await backend.close()
    expect(requestsSince(standin!, mark).map(describeRequest).sort()).toEqual([
      'GET containerGroupProfiles 200',
      'GET networkSecurityGroups 200',
      'GET subnets 200',
    ])
  })

  it('refuses brokered credentials and inward exemptions, which need a gateway', () => {
    expectRefusal(
      caught(() =>
        testBackend(
          standin!,
          {},
          {
            brokeredCredentials: [
              { host: 'api.example.com', header: 'authorization', value: 'secret' },
            ],
          },
        ),
      ),
      'brokeredCredentials',
    )
    expectRefusal(
      caught(() => testBackend(standin!, {}, { allowInwardFor: ['db.internal'] })),
      'allowInwardFor',
    )
  })

  it('reports every problem of a profile that cannot carry a sandbox at once, and claims nothing', async () => {
    // The stand-in's profile has the agent on 7070; a backend expecting 7171 finds two problems.
    const { backend } = testBackend(standin!, { workerPort: 7171 })
    const mark = standin!.requests().length
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    expect((error as SandboxConfigValidationError).issues.map((issue) => issue.path)).toEqual([
      'properties.containers[sandbox].environmentVariables.CORDON_AGENT_LISTEN',
      'properties.ipAddress.ports',
    ])
    expect(requestsSince(standin!, mark).map(describeRequest).sort()).toEqual([
      'GET containerGroupProfiles 200',
      'GET networkSecurityGroups 200',
      'GET subnets 200',
    ])
  })

  it('refuses a name prefix that gives names ACI rejects', () => {
    for (const containerNamePrefix of ['-cordon', 'cordon-', 'a--b', 'x'.repeat(37)]) {
      const error = caught(() =>
        createAciStandbyPoolBackend(backendConfig(standin!, { containerNamePrefix }), {
          providerId: 'prv_x',
          layout: resolveLayout({ outputs: { source: { type: 'inImage' } } }),
          brokeredCredentials: [],
          allowInwardFor: [],
          emit: () => {},
        }),
      )
      expect(SandboxConfigValidationError.isInstance(error), containerNamePrefix).toBe(true)
    }
  })
})
