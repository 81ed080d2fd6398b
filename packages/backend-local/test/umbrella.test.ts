import { createSandboxProvider } from '@cordon/sandbox'
import { expect, it } from 'vitest'
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
