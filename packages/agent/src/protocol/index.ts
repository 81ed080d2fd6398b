/**
 * The cordon agent protocol: framing, messages, the challenge-response proof,
 * and the client half of every operation. Every backend that talks to
 * `@cordon/agent` imports this module instead of re-implementing the wire.
 */
export * from './auth.js'
export * from './client-operations.js'
export * from './frame-codec.js'
export * from './framed-connection.js'
export * from './messages.js'
