import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect, it } from 'vitest'

/**
 * A host that awaits `close()` and then ends must not end halfway: a refill
 * that finishes while the pool closes is destroyed before `close()`
 * resolves, even when nothing the refill waits on holds the event loop (a
 * spare connection, the engine's event stream). Run in a child process
 * with nothing else alive, so an early exit shows as output missing.
 */
it('close() keeps the process alive until a refill in flight is created and destroyed', () => {
  const module = fileURLToPath(new URL('../dist/warm-pool.js', import.meta.url))
  const script = `
    const { WarmPool } = await import(${JSON.stringify(module)})
    // Both the create and the destroy finish on timers that hold no reference to the loop.
    const later = (ms, value) => new Promise((resolve) => setTimeout(() => resolve(value), ms).unref())
    const pool = new WarmPool({
      size: 1,
      create: () =>
        later(50, {
          destroy: async () => {
            await later(50)
            process.stdout.write('refill destroyed\\n')
          },
        }),
    })
    pool.fill()
    await pool.close()
    process.stdout.write('closed\\n')
  `
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
  })
  expect(run.stdout).toBe('refill destroyed\nclosed\n')
  expect(run.status, run.stderr).toBe(0)
})
