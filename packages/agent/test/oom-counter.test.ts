import { beforeEach, describe, expect, it, vi } from 'vitest'

/**
 * The counter's reads, observed through a stand-in `readFileSync`: the files
 * the kernel would show (cgroup v1 under runc, nothing under gVisor) are the
 * table below. The real counter is proved end to end by the Docker backend's
 * `end-reasons-and-usage.test.ts` (a memory hog's `oomKilled: true`).
 */
const files = new Map<string, string | NodeJS.ErrnoException>()
const reads: string[] = []

vi.mock('node:fs', () => ({
  readFileSync: (path: string) => {
    reads.push(path)
    const held = files.get(path)
    if (held === undefined) throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' })
    if (typeof held !== 'string') throw held
    return held
  },
}))

async function freshCounter() {
  vi.resetModules()
  return import('../src/oom-counter.js')
}

const V1 = '/sys/fs/cgroup/memory/memory.oom_control'
const oomControl = (kills: number) => `oom_kill_disable 0\nunder_oom 0\noom_kill ${kills}\n`
const normalEnd = { signal: null, timedOut: false, aborted: false }
const unaskedKill = { signal: 'SIGKILL' as const, timedOut: false, aborted: false }

beforeEach(() => {
  files.clear()
  reads.length = 0
})

describe("the agent's OOM-kill counter (oom-counter.ts)", () => {
  it('reads the file that answered, and only it, once it has answered', async () => {
    files.set('/proc/self/cgroup', '5:memory:/\n0::/\n')
    files.set(V1, oomControl(3))
    const { readOomKillCount } = await freshCounter()
    expect(readOomKillCount()).toBe(3)
    reads.length = 0
    files.set(V1, oomControl(4))
    expect(readOomKillCount()).toBe(4)
    expect(reads).toEqual([V1])
  })

  it('reads the counter again only for a SIGKILL that cordon did not send', async () => {
    files.set('/proc/self/cgroup', '5:memory:/\n')
    files.set(V1, oomControl(0))
    const { endedByOomKill, readOomKillCount } = await freshCounter()
    const before = readOomKillCount()
    files.set(V1, oomControl(1))
    reads.length = 0
    expect(endedByOomKill(before, normalEnd)).toBe(false)
    expect(endedByOomKill(before, { ...unaskedKill, timedOut: true })).toBe(false)
    expect(endedByOomKill(before, { ...unaskedKill, aborted: true })).toBe(false)
    expect(endedByOomKill(before, { ...unaskedKill, signal: 'SIGTERM' })).toBe(false)
    expect(reads).toEqual([])
    expect(endedByOomKill(before, unaskedKill)).toBe(true)
    expect(reads).toEqual([V1])
    // A SIGKILL with the counter where it was is someone else's kill.
    expect(endedByOomKill(1, unaskedKill)).toBe(false)
    expect(endedByOomKill(undefined, unaskedKill)).toBe(false)
  })

  it('stops asking where no such file exists (gVisor), after one round', async () => {
    files.set('/proc/self/cgroup', '')
    const { endedByOomKill, readOomKillCount } = await freshCounter()
    expect(readOomKillCount()).toBeUndefined()
    expect(reads.length).toBeGreaterThan(1)
    reads.length = 0
    expect(readOomKillCount()).toBeUndefined()
    expect(endedByOomKill(undefined, unaskedKill)).toBe(false)
    expect(reads).toEqual([])
  })

  it('asks again after a failure other than a missing file', async () => {
    files.set('/proc/self/cgroup', '5:memory:/\n')
    files.set(V1, Object.assign(new Error('EMFILE'), { code: 'EMFILE' }))
    const { readOomKillCount } = await freshCounter()
    expect(readOomKillCount()).toBeUndefined()
    files.set(V1, oomControl(2))
    expect(readOomKillCount()).toBe(2)
  })
})
