import { randomBytes } from 'node:crypto'
import type { CordonSandboxProvider } from '@cordon/core'
import { afterAll, describe, expect, it } from 'vitest'
import { describeAlongside } from './run-alongside.js'
import { testProvider } from './test-run.js'

// A hostile sandbox against the next one to mount its named volume: what
// it leaves there must not stop that sandbox from starting, nor keep
// rights the next one's uid does not have.
for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`a hostile sandbox's leftovers in a named volume (${runtime})`, () => {
    const name = `t-hostile-${runtime}-${randomBytes(4).toString('hex')}`
    /** A provider whose sandboxes mount the named volume `volume` read-write as their outputs. */
    const onVolume = (volume: string): CordonSandboxProvider =>
      testProvider(
        { runtime, cpus: 1 },
        {
          layout: { outputs: { source: { type: 'volume', name: volume } } },
          defaultMemoryLimitMb: 96,
        },
      )
    const provider = onVolume(name)
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

    it('a tree the last sandbox made deeper than PATH_MAX is the next one’s, and that sandbox starts', async () => {
      const deep = `${name}-deep`
      await provider.volumes.create({ name: deep, sizeMb: 32 })
      const deepProvider = onVolume(deep)
      // Two chains of 1,100 `a/` each (2,200 bytes, each made by one
      // `mkdir -p`), the second moved to the bottom of the first: a tree
      // whose deepest names are past 4,400 bytes, which no single call named.
      const chain = Array.from({ length: 1100 }, () => 'a').join('/')
      try {
        const first = await deepProvider.create({})
        try {
          const made = await first.exec('sh', [
            '-c',
            `cd /mnt/user-data/outputs && mkdir -p x/${chain} y/${chain} && mv y x/${chain}/ && echo made`,
          ])
          expect(made.stdout).toBe('made\n')
        } finally {
          await first.destroy()
        }
        const second = await deepProvider.create({})
        try {
          const seen = await second.exec('sh', [
            '-c',
            `cd /mnt/user-data/outputs && id -u && stat -c %u x x/${chain}/y && touch x/${chain}/y/written && echo ok`,
          ])
          const [uid, top, middle, ok] = seen.stdout.trim().split('\n')
          expect([top, middle, ok]).toEqual([uid, uid, 'ok'])
        } finally {
          await second.destroy()
        }
      } finally {
        await deepProvider.close()
        await provider.volumes.remove(deep).catch(() => {})
      }
    })
  })
}
