/**
 * cordon-startup-clock.so (launcher/startup-clock.c) on this host, where the
 * vDSO answers every clock read without a system call: preloaded into a Node
 * by the loader, it is mapped in that process only (not in the commands the
 * process starts), and it steps aside from the first read, so back-to-back
 * reads are all fresh. What it does in a gVisor sandbox's first second, where
 * it keeps reads, is proved in the Docker backend's test/startup-clock.test.ts.
 */
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
// The built entry: the library sits beside it, in dist/launcher.
import { startupClockLibraryPath } from '../dist/index.js'

const LOADER = '/lib64/ld-linux-x86-64.so.2'

const probe = `
const { execFileSync } = require('node:child_process')
const maps = require('node:fs').readFileSync('/proc/self/maps', 'utf8')
let fresh = 0
for (let i = 0; i < 1000; i++) {
  const first = process.hrtime.bigint()
  if (process.hrtime.bigint() !== first) fresh++
}
const before = Date.now()
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50)
console.log(JSON.stringify({
  mapped: maps.includes('cordon-startup-clock'),
  childMapped: execFileSync('cat', ['/proc/self/maps'], { encoding: 'utf8' }).includes('cordon-startup-clock'),
  fresh,
  sleptMs: Date.now() - before,
}))
`

describe('cordon-startup-clock.so on a host whose vDSO is fast', () => {
  it('is built for x64 only', () => {
    expect(startupClockLibraryPath('arm64')).toBeUndefined()
    if (process.arch === 'x64') expect(existsSync(startupClockLibraryPath('x64')!)).toBe(true)
  })

  it.runIf(process.arch === 'x64')(
    'is mapped in the preloaded process only, and passes every read through',
    () => {
      const library = startupClockLibraryPath('x64')!
      const out = execFileSync(LOADER, ['--preload', library, process.execPath, '-e', probe], {
        encoding: 'utf8',
      })
      const seen = JSON.parse(out) as {
        mapped: boolean
        childMapped: boolean
        fresh: number
        sleptMs: number
      }
      expect(seen.mapped).toBe(true)
      expect(seen.childMapped).toBe(false)
      expect(seen.fresh).toBe(1000)
      expect(seen.sleptMs).toBeGreaterThanOrEqual(50)
    },
  )
})
