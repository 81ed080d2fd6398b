import { closeTestArmStandin, endReasonOf, type TestArmStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_ARM_API_VERSION } from '../src/aci-defaults.js'
import { backendConfig, startTestStandin, testProvider } from './standin-fixture.js'

/**
 * A container group that Azure removes underneath its host (a spot eviction,
 * an operator, a pool's housekeeping): the sandbox says so. The next
 * operation that cannot reach the agent asks ARM about the group, and the
 * sandbox ends with `evicted`.
 */
describe('a group removed behind the host (ARM stand-in)', () => {
  let standin: TestArmStandin
  beforeAll(async () => {
    standin = await startTestStandin()
  }, 120_000)
  afterAll(() => closeTestArmStandin(standin), 120_000)

  it('ends the sandbox with end reason evicted', async () => {
    const provider = testProvider(standin)
    try {
      const sandbox = await provider.create()
      expect((await sandbox.exec('echo', ['up'])).stdout).toBe('up\n')
      const [group] = standin.groups()
      expect(group).toBeDefined()
      const config = backendConfig(standin)
      const url = `${standin.url}/subscriptions/${config.subscriptionId}/resourceGroups/${config.resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${group}?api-version=${DEFAULT_ARM_API_VERSION}`
      const deleted = await fetch(url, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${standin.token}` },
      })
      expect([200, 202, 204]).toContain(deleted.status)
      for (let waited = 0; standin.groups().includes(group!); waited += 100) {
        if (waited > 30_000) throw new Error('the stand-in did not delete the group')
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const failed = await sandbox.exec('echo', ['gone?']).catch((error: unknown) => error)
      expect(failed).toBeInstanceOf(Error)
      expect(await endReasonOf(sandbox)).toBe('evicted')
      expect(sandbox.status).toBe('destroyed')
    } finally {
      await provider.close()
    }
  }, 120_000)
})
