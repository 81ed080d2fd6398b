import { type ChildProcess, spawn } from 'node:child_process'
import { Socket } from 'node:net'
import { AGENT_ENV, agentProgramPath } from '@cordon/agent'
import { StdioChannel } from '@cordon/agent/sandbox'

/** The agent as a child process of the host, and the channel over its stdio. */
export interface AgentChild {
  readonly child: ChildProcess
  readonly channel: StdioChannel
  /** Resolves when the agent has exited (at once if it already has). */
  readonly exited: Promise<void>
}

/**
 * Starts cordon's agent as a child of this process, serving its stdin and
 * stdout (`CORDON_AGENT_LISTEN=stdio`) with `workspace` as its only write
 * root, and sends it its secret as the first line on stdin (never in its
 * environment). The agent ends when its stdin closes: when the channel is
 * closed, and when this process dies, whatever kills it; its end kills
 * every process its commands left.
 *
 * The child's environment is only what the agent needs: the host's own
 * variables do not reach it or its commands.
 */
export function startAgentChild(options: {
  readonly nodePath: string
  readonly workspace: string
  readonly secret: string
}): AgentChild {
  const child = spawn(options.nodePath, [agentProgramPath('cjs')], {
    cwd: options.workspace,
    env: {
      [AGENT_ENV.listen]: 'stdio',
      [AGENT_ENV.secretStdin]: '1',
      [AGENT_ENV.writeRoots]: options.workspace,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve()
    else child.once('exit', () => resolve())
    // A failed spawn (a bad nodePath) emits `error` and no `exit`.
    child.once('error', () => resolve())
  })
  const pipes = [child.stdin, child.stdout, child.stderr]
  for (const pipe of pipes) pipe?.on('error', () => {})
  const keepAlive = (on: boolean): void => {
    if (on) child.ref()
    else child.unref()
    for (const pipe of pipes) {
      if (pipe instanceof Socket) {
        if (on) pipe.ref()
        else pipe.unref()
      }
    }
  }
  const channel = new StdioChannel({
    fromAgent: child.stdout!,
    toAgent: child.stdin!,
    agentLog: child.stderr!,
    keepAlive: { ref: () => keepAlive(true), unref: () => keepAlive(false) },
    closeCarrier: () => child.stdin?.end(),
  })
  channel.sendPreface(`${options.secret}\n`)
  return { child, channel, exited }
}
