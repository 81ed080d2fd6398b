import { constants } from 'node:os'

/** The signals that ask cordon to stop. */
const STOPPING_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const

type StoppingSignal = (typeof STOPPING_SIGNALS)[number]

/**
 * SIGINT, SIGTERM and SIGHUP to cordon while one of its commands runs (one
 * instance, made by main.ts, for every command). The first one aborts
 * `signal`: the command ends what it does (a sandbox's program is killed, a
 * pull or build is ended) and removes what it made before cordon exits;
 * `exitCode` is then what a shell reports for a program that signal ended,
 * 128 plus its number (130, 143, 129). A second one ends cordon at once, as
 * Node's default does.
 */
export class LocalSignals implements Disposable {
  private readonly aborting = new AbortController()
  private received: StoppingSignal | undefined
  private readonly listeners = new Map<StoppingSignal, () => void>()

  constructor() {
    for (const name of STOPPING_SIGNALS) {
      const listener = (): void => {
        this.received ??= name
        this.aborting.abort()
      }
      this.listeners.set(name, listener)
      process.once(name, listener)
    }
  }

  get signal(): AbortSignal {
    return this.aborting.signal
  }

  /** The signal that stopped cordon, if one did. */
  get signalName(): StoppingSignal | undefined {
    return this.received
  }

  /** 128 plus the number of the signal that stopped cordon, if one did. */
  get exitCode(): number | undefined {
    return this.received === undefined ? undefined : 128 + constants.signals[this.received]
  }

  [Symbol.dispose](): void {
    for (const [name, listener] of this.listeners) process.off(name, listener)
  }
}
