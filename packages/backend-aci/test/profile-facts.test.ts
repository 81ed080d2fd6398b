import { SandboxConfigValidationError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { parseProfileDocument } from '../src/profile-facts.js'

function profile(
  overrides: {
    env?: Record<string, string>
    ports?: number[]
    memory?: unknown
    containers?: unknown[]
  } = {},
) {
  const env = {
    CORDON_ACI_SECRET_FILE: '/mnt/configmap/sandbox/cordon-agent-secret',
    CORDON_AGENT_LISTEN: 'tcp:0.0.0.0:2024',
    CORDON_MAX_PROCESSES: '256',
    ...overrides.env,
  }
  return {
    properties: {
      revision: 3,
      containers: overrides.containers ?? [
        {
          name: 'sandbox',
          properties: {
            environmentVariables: Object.entries(env).map(([name, value]) => ({ name, value })),
            resources: { requests: { cpu: 1, memoryInGB: overrides.memory ?? 1.5 } },
            volumeMounts: [
              { name: 'uploads', mountPath: '/mnt/user-data/uploads', readOnly: true },
              { name: 'outputs', mountPath: '/mnt/user-data/outputs' },
            ],
          },
        },
      ],
      volumes: [
        { name: 'uploads', azureFile: { shareName: 'uploads', storageAccountName: 'cordondata' } },
        { name: 'outputs', emptyDir: {} },
      ],
      ipAddress: {
        type: 'Private',
        ports: (overrides.ports ?? [2024]).map((port) => ({ port, protocol: 'TCP' })),
      },
    },
  }
}

function problemsOf(document: unknown): string[] {
  try {
    parseProfileDocument(document, 2024)
  } catch (error) {
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    return (error as SandboxConfigValidationError).issues.map((issue) => issue.path)
  }
  return []
}

describe('container group profile', () => {
  it('reads the envelope every claim inherits', () => {
    expect(parseProfileDocument(profile(), 2024)).toEqual({
      revision: 3,
      containerName: 'sandbox',
      memoryLimitMb: 1536,
      maxProcesses: 256,
      ipAddressType: 'Private',
      mounts: [
        {
          mountPath: '/mnt/user-data/uploads',
          readOnly: true,
          source: { kind: 'azureFile', shareName: 'uploads', storageAccountName: 'cordondata' },
        },
        { mountPath: '/mnt/user-data/outputs', readOnly: false, source: { kind: 'emptyDir' } },
      ],
    })
  })

  it('takes a memory limit over the request, and leaves the process limit undefined when the profile sets none', () => {
    const document = profile({ env: {} })
    const container = document.properties.containers[0] as {
      properties: { resources: unknown; environmentVariables: Array<{ name: string }> }
    }
    container.properties.resources = { requests: { memoryInGB: 2 }, limits: { memoryInGB: 1 } }
    container.properties.environmentVariables = container.properties.environmentVariables.filter(
      (v) => v.name !== 'CORDON_MAX_PROCESSES',
    )
    expect(parseProfileDocument(document, 2024)).toMatchObject({
      memoryLimitMb: 1024,
      maxProcesses: undefined,
    })
  })

  it('reports every way a profile cannot carry a sandbox, at once', () => {
    expect(
      problemsOf(
        profile({
          env: {
            CORDON_ACI_SECRET_FILE: '/run/secret',
            CORDON_AGENT_SECRET: 'shared-by-every-sandbox',
            CORDON_AGENT_LISTEN: 'unix:/run/agent.sock',
            CORDON_MAX_PROCESSES: 'lots',
          },
          ports: [80],
          memory: 0,
        }),
      ),
    ).toEqual([
      'properties.containers[sandbox].environmentVariables.CORDON_ACI_SECRET_FILE',
      'properties.containers[sandbox].environmentVariables.CORDON_AGENT_SECRET',
      'properties.containers[sandbox].environmentVariables.CORDON_AGENT_LISTEN',
      'properties.ipAddress.ports',
      'properties.containers[sandbox].resources.requests.memoryInGB',
      'properties.containers[sandbox].environmentVariables.CORDON_MAX_PROCESSES',
    ])
  })

  it('needs exactly one container running the entrypoint', () => {
    expect(
      problemsOf(
        profile({ containers: [{ name: 'web', properties: { environmentVariables: [] } }] }),
      ),
    ).toContain('properties.containers')
    expect(problemsOf({})).toContain('properties.containers')
  })
})
