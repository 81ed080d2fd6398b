import { describe, expect, it } from 'vitest'
import { processLimits } from '../src/container-spec.js'

describe('the pids cgroup limit', () => {
  it('never passes the kernel ceiling (a larger pids.max is EINVAL), while RLIMIT_NPROC keeps the asked limit', () => {
    for (const runtime of ['docker', 'runsc'] as const) {
      const limits = processLimits({ runtime }, 4_194_304)
      expect(limits.PidsLimit).toBe(4_194_304)
      expect(limits.Ulimits[0]).toEqual({ Name: 'nproc', Soft: 4_194_304, Hard: 4_194_304 })
    }
    expect(processLimits({ runtime: 'docker' }, 32).PidsLimit).toBe(80)
  })
})
