import { randomBytes } from 'node:crypto'
import type { CordonSandboxProvider } from '@cordon/core'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterAll, describe, expect, it } from 'vitest'
import { createDockerSandboxProvider } from '../src/index.js'

// A hostile sandbox against the next one to mount its named volume: what
// it leaves there must not stop that sandbox from starting, nor keep
// rights the next one's uid does not have.
for (const runtime of ['docker', 'runsc'] as const) {
  describe(`a hostile sandbox's leftovers in a named volume (${runtime})`, () => {
    const name = `t-hostile-${runtime}-${randomBytes(4).toString('hex')}`
    const provider: CordonSandboxProvider = createDockerSandboxProvider({
      backend: {
        tier: 'container',
        runtime,
        image: BUSYBOX_IMAGE,
        cpus: 1,
        labels: testRunLabels(),
      },
      layout: { outputs: { source: { type: 'volume', name } } },
      defaultMemoryLimitMb: 96,
    })
    afterAll(async () => {
      await provider.volumes.remove(name).catch(() => {})
      await provider.close()
    })

    it('a set-user-id file the last sandbox left is the next one’s, its bit cleared, and that sandbox starts', async () => {
      await provider.volumes.create({ name, sizeMb: 16 })
      const first = await provider.create({})
      let firstUid: string
      try {
        // Its own file, so chmod u+s is allowed; the agent that hands the
        // tree to the next uid must clear the bit to change the owner.
        const planted = await first.exec('sh', [
          '-c',
          'cd /mnt/user-data/outputs && echo x > suid && chmod 4755 suid && echo y > sgid && chmod 2755 sgid && id -u && stat -c %a suid sgid',
        ])
        const [uid, ...modes] = planted.stdout.trim().split('\n')
        firstUid = uid!
        expect(modes).toEqual(['4755', '2755'])
      } finally {
        await first.destroy()
      }
      const second = await provider.create({})
      try {
        const seen = await second.exec('sh', [
          '-c',
          'cd /mnt/user-data/outputs && id -u && stat -c "%u %a" suid sgid && echo z >> suid && cat suid',
        ])
        const [uid, suid, sgid, ...content] = seen.stdout.trim().split('\n')
        expect(uid).not.toBe(firstUid)
        expect(suid).toBe(`${uid} 755`)
        expect(sgid).toBe(`${uid} 755`)
        expect(content).toEqual(['x', 'z'])
      } finally {
        await second.destroy()
      }
    })
  })
}
