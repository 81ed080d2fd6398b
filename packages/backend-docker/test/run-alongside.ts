import { describe } from 'vitest'

/**
 * A suite that runs at the same time as its neighbours declared the same
 * way, its own tests one after another as written. For a file that declares
 * one suite per runtime: the runc and gVisor suites each have their own
 * provider and sandboxes, so running them together takes the slower one's
 * time rather than the sum (most of it is waiting on the engine, and the CI
 * run's longest package is this one). Only for suites that share nothing
 * with their neighbours: no module state, no spies on shared prototypes, no
 * environment variables (they all live in the one test process), and no
 * check that counts everything the test run has on the engine.
 */
export function describeAlongside(title: string, body: () => void): void {
  describe.concurrent(title, () => {
    describe.sequential('', body)
  })
}
