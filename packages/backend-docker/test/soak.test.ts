import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { docker, testProvider } from './test-run.js'

describe('soak: 50 sandboxes, 10 at a time', () => {
  it('creates, uses and removes every one without an error or a leftover', async () => {
    const provider = testProvider()
    const failures: unknown[] = []
    let done = 0
    const one = async (index: number) => {
      try {
        const sandbox = await provider.create()
        const content = randomBytes(4096)
        await sandbox.writeFile(`round-trip-${index}.bin`, content)
        const back = await sandbox.readFile(`round-trip-${index}.bin`)
        const listed = await sandbox.listFiles()
        const exec = await sandbox.exec('sh', ['-c', `echo ${index}`])
        if (!back.equals(content)) throw new Error(`sandbox ${index}: file changed`)
        if (listed.length !== 1) throw new Error(`sandbox ${index}: ${listed.length} files`)
        if (exec.stdout !== `${index}\n`)
          throw new Error(`sandbox ${index}: exec said ${exec.stdout}`)
        await sandbox.destroy()
        done++
      } catch (error) {
        failures.push(error)
      }
    }
    try {
      for (let batch = 0; batch < 5; batch++)
        await Promise.all(Array.from({ length: 10 }, (_, index) => one(batch * 10 + index)))
    } finally {
      await provider.close()
    }
    expect(failures).toEqual([])
    expect(done).toBe(50)
    // Nothing of this provider is left on the engine.
    const filters = { label: [`cordon.provider=${provider.instanceId}`] }
    let containers = await docker.listContainers({ all: true, filters })
    for (let attempt = 0; attempt < 20 && containers.length > 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 250))
      containers = await docker.listContainers({ all: true, filters })
    }
    expect(containers).toEqual([])
    expect((await docker.listVolumes({ filters })).Volumes ?? []).toEqual([])
    expect(await docker.listNetworks({ filters })).toEqual([])
  }, 240_000)
})
