/**
 * The lock that makes starts from one checkpoint take turns across host
 * processes: exclusive while held, let go on failure, taken over from a
 * holder that died, and only ever the abandoned lock removed.
 */

/** A pid no process has: one that has just exited. */
function deadPid(): string {
  return spawnSync(process.execPath, [
    '-e',
    'process.stdout.write(String(process.pid))',
  ]).stdout.toString()
}

import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { abandonedLock, removeLockIf, withStartLock } from '../src/checkpoint-start-lock.js'

const made: string[] = []
/** A directory of its own for a test's lock, removed after the file's tests. */
function lockDirectory(): string {
  const dir = mkdtempSync(join(tmpdir(), 'cordon-lock-'))
  made.push(dir)
  return dir
}
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true })
})

describe('withStartLock', () => {
  it('lets one holder in at a time and lets go when the work fails', async () => {
    const path = join(lockDirectory(), 'snp_x.start-lock')
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
    const path = join(lockDirectory(), 'snp_y.start-lock')
    writeFileSync(path, deadPid())
    expect(await withStartLock(path, async () => 'taken')).toBe('taken')
    expect(existsSync(path)).toBe(false)
  })

  it('waits for a live holder, and a wait can be given up', async () => {
    const path = join(lockDirectory(), 'snp_z.start-lock')
    writeFileSync(path, String(process.pid))
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 100)
    await expect(withStartLock(path, async () => 'never', controller.signal)).rejects.toThrow()
    expect(existsSync(path)).toBe(true)
  })

  it('of two waiters that found the same dead holder, the second does not remove the lock the first took', () => {
    const dir = lockDirectory()
    const path = join(dir, 'snp_w.start-lock')
    writeFileSync(path, deadPid())
    // Both look before either acts.
    const seenByFirst = abandonedLock(path, Date.now())
    const seenBySecond = abandonedLock(path, Date.now())
    expect(seenByFirst).toBeDefined()
    expect(seenBySecond).toBe(seenByFirst)
    // The first removes the abandoned lock and takes its own (the file
    // system may well give it the freed inode's number).
    removeLockIf(path, seenByFirst!)
    expect(existsSync(path)).toBe(false)
    writeFileSync(path, String(process.pid), { flag: 'wx' })
    // The second acts on what it saw: the first's lock stays.
    removeLockIf(path, seenBySecond!)
    expect(readFileSync(path, 'utf8')).toBe(String(process.pid))
    // And nothing is left beside it.
    expect(readdirSync(dir)).toEqual(['snp_w.start-lock'])
  })

  it("a holder whose lock was taken over as stale leaves its successor's lock when it finishes", async () => {
    const dir = lockDirectory()
    const path = join(dir, 'snp_v.start-lock')
    await withStartLock(path, async () => {
      // What a waiter does after STALE_AFTER_MS: removes this lock and takes its own.
      rmSync(path)
      writeFileSync(path, 'successor', { flag: 'wx' })
    })
    expect(readFileSync(path, 'utf8')).toBe('successor')
    expect(readdirSync(dir)).toEqual(['snp_v.start-lock'])
  })

  it('a lock whose holder is alive is not abandoned', () => {
    const path = join(lockDirectory(), 'snp_u.start-lock')
    writeFileSync(path, String(process.pid))
    expect(abandonedLock(path, Date.now())).toBeUndefined()
    // Past the stale age it is, whoever holds it.
    expect(abandonedLock(path, Date.now() + 121_000)).toBeDefined()
    writeFileSync(path, '')
    expect(abandonedLock(path, Date.now())).toBeUndefined()
  })
})
