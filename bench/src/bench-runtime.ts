/**
 * The engine runtime a scenario runs under. The scenarios that issue 30 asks
 * about under gVisor (create to first exec, warm-pool claim, exec round trip,
 * file transfer) are written once and registered twice in main.ts: as before
 * under runc, and with a `-gvisor` id under runsc, every container of every
 * arm (cordon's and the peers') on that runtime.
 */

/** An engine runtime the bench can ask for: runc, or gVisor's runsc. */
export type EngineRuntime = 'runc' | 'runsc'

export interface BenchRuntime {
  /**
   * What every arm asks the engine for; `undefined` leaves the engine's
   * default (runc), as a host that sets nothing gets, so the runc rows
   * measure what they always measured.
   */
  readonly engineRuntime: EngineRuntime | undefined
  /** Appended to a scenario's id: '' under runc, `-gvisor` under gVisor. */
  readonly idSuffix: string
  /** Appended to titles and to the scenario column of the ratio table. */
  readonly label: string
  /**
   * Whether the peers the targets do not name (testcontainers, the CLI's
   * `docker run`) run too. Under gVisor the targets name only the bare
   * dockerode floor, `docker exec` and `docker cp`, and every create costs
   * about a second, so the others are left out to keep the run in budget.
   */
  readonly everyPeer: boolean
}

export const RUNC: BenchRuntime = {
  engineRuntime: undefined,
  idSuffix: '',
  label: '',
  everyPeer: true,
}

export const GVISOR: BenchRuntime = {
  engineRuntime: 'runsc',
  idSuffix: '-gvisor',
  label: ' (gVisor)',
  everyPeer: false,
}
