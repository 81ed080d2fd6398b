import { defineBackend } from '@cordon/core/backend'
import { createSandboxProvider } from '@cordon/sandbox'
import { expect, it } from 'vitest'
import { z } from 'zod'
import { localBackend } from '../src/index.js'

it('a host names process:local through the umbrella, with no cast', async () => {
  const provider = createSandboxProvider(
    { backend: { tier: 'process', runtime: 'local' }, defaultEgress: { kind: 'allow-all' } },
    { backends: [localBackend] },
  )
  try {
    expect(provider.backend).toBe('process:local')
    expect(provider.enforcement.isolation).toBe('none')
    await using sandbox = await provider.create()
    const result = await sandbox.exec('sh', ['-c', 'echo "$((6 * 7))"'])
    expect(result).toMatchObject({ exitCode: 0, stdout: '42\n' })
  } finally {
    await provider.close()
  }
})

/** A second third-party definition with a config of its own (never loaded here). */
const otherBackend = defineBackend<{ readonly tier: 'elsewhere'; readonly zone: string }>({
  name: 'elsewhere:test',
  tier: 'elsewhere',
  selects: (backend) => backend.tier === 'elsewhere',
  configSchema: z.object({ tier: z.literal('elsewhere'), zone: z.string() }).strict(),
  layout: 'none',
  enforcement: { ...localBackend.enforcement },
  load: async () => {
    throw new Error('not loaded in this test')
  },
})

it('a host passes two third-party definitions and a literal config, with no type argument or cast', async () => {
  const provider = createSandboxProvider(
    { backend: { tier: 'process', runtime: 'local' }, defaultEgress: { kind: 'allow-all' } },
    { backends: [localBackend, otherBackend] },
  )
  try {
    expect(provider.backend).toBe('process:local')
    await using sandbox = await provider.create()
    expect((await sandbox.exec('sh', ['-c', 'echo "$((6 * 7))"'])).stdout).toBe('42\n')
  } finally {
    await provider.close()
  }
  // The other definition's own keys type-check too, and its config is validated by its schema.
  expect(() =>
    createSandboxProvider(
      { backend: { tier: 'elsewhere', zone: 7 as unknown as string } },
      { backends: [localBackend, otherBackend] },
    ),
  ).toThrow(/zone/)
})
