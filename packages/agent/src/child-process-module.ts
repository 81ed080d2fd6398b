import type * as ChildProcessModule from 'node:child_process'

/**
 * Node's `child_process`, loaded the first time a caller needs it rather
 * than when the agent starts: an agent started by cordon-launcher starts
 * every command through it and may never need Node's own spawn, and loading
 * the module (with the modules it pulls in) is part of the start-up every
 * Docker sandbox's create waits for.
 */
export function childProcess(): typeof ChildProcessModule {
  return process.getBuiltinModule('node:child_process')
}
