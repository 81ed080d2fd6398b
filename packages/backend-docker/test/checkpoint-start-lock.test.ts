/**
 * The lock that makes starts from one checkpoint take turns across host
 * processes: exclusive while held, let go on failure, taken over from a
 * holder that died.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { withStartLock } from '../src/checkpoint-start-lock.js'

describe('withStartLock', () => {
  it('lets one holder in at a time and lets go when the work fails', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'cordon-lock-')), 'snp_x.start-lock')
    const order: string[] = []
    const hold = (name: string, ms: number, fail = false) =>
      withStartLock(path, async () => {
        order.push(`${name} in`)
        await new Promise((resolve) => setTimeout(resolve, ms))
        order.push(`${name} out`)
        if (fail) throw new Error(`${name} failed`)
        return name
      })
    const results = await Promise.allSettled([hold('a', 60, true), hold('b', 10), hold('c', 10)])
    expect(results.map((result) => result.status)).toEqual(['rejected', 'fulfilled', 'fulfilled'])
    // Never two inside at once.
    for (let i = 0; i < order.length; i += 2) {
      expect(order[i]).toMatch(/ in$/)
      expect(order[i + 1]).toBe(order[i]!.replace(' in', ' out'))
    }
    expect(existsSync(path)).toBe(false)
  })

  it("takes over a lock whose holder's process is gone", async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'cordon-lock-')), 'snp_y.start-lock')
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'])
    writeFileSync(path, gone.stdout.toString())
    expect(await withStartLock(path, async () => 'taken')).toBe('taken')
    expect(existsSync(path)).toBe(false)
  })

  it('waits for a live holder, and a wait can be given up', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'cordon-lock-')), 'snp_z.start-lock')
    writeFileSync(path, String(process.pid))
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 100)
    await expect(withStartLock(path, async () => 'never', controller.signal)).rejects.toThrow()
    expect(existsSync(path)).toBe(true)
  })
})
