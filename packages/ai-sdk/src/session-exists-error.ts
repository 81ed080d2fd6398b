import { HarnessError } from '@ai-sdk/harness'

const marker = Symbol.for('cordon.ai-sdk.CordonHarnessSessionExistsError')

/**
 * `createSession` was given the `sessionId` of a session this provider still
 * holds. A second sandbox under the same id would leave the first running
 * with nothing to stop it, so the call is refused before anything is made;
 * `resumeSession` returns the existing one.
 */
export class CordonHarnessSessionExistsError extends HarnessError {
  protected readonly [marker] = true
  readonly sessionId: string

  constructor({ sessionId, providerId }: { sessionId: string; providerId: string }) {
    super({
      message: `cordon (${providerId}) already holds sandbox session "${sessionId}": resume it with resumeSession, or stop it before creating another under the same id`,
    })
    this.name = 'CordonHarnessSessionExistsError'
    this.sessionId = sessionId
  }

  static override isInstance(error: unknown): error is CordonHarnessSessionExistsError {
    return typeof error === 'object' && error !== null && marker in error
  }
}
