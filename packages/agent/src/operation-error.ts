import type { AgentErrorCode } from './protocol/messages.js'

/** A request the agent refuses or cannot complete; sent to the client as an `error` message. */
export class AgentOperationError extends Error {
  constructor(
    readonly code: AgentErrorCode,
    message: string,
  ) {
    super(message)
    this.name = 'AgentOperationError'
  }
}
