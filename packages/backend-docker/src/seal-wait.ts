/**
 * How long `destroy()` lets the agent seal writable host directories (kill
 * the user's processes, walk the outputs) before the engine kills it. A
 * seal cut short leaves what it had not reached, links out included, so
 * this is a bound against a stuck agent, not a budget: the walk's time
 * grows with the entries the sandbox left (under gVisor every call on a
 * host directory goes through its file server), and `destroy()` fails,
 * naming the directories, if the bound is ever reached.
 */
export const SEAL_WAIT_MS = 5 * 60_000

let sealWait = SEAL_WAIT_MS

/** The bound `destroy()` applies: {@link SEAL_WAIT_MS} unless a test shortened it. */
export function sealWaitMs(): number {
  return sealWait
}

/**
 * Shortens the bound for this process, and returns what puts it back. It
 * exists for `test/seal-bound.test.ts`, which stops a real agent and shows
 * that `destroy()` gives up on it, fails naming the directories and still
 * removes everything: waiting the real 5 minutes per run is no test. Not
 * exported from the package's index, so no host can change the bound.
 */
export function shortenSealWaitForTest(ms: number): () => void {
  if (!(Number.isInteger(ms) && ms > 0 && ms <= SEAL_WAIT_MS))
    throw new RangeError(`a seal wait of ${ms} ms: it can only be shortened, to a positive integer`)
  sealWait = ms
  return () => {
    sealWait = SEAL_WAIT_MS
  }
}
