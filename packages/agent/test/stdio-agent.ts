import { spawn } from 'node:child_process'
import { newAgentSecret } from '../src/protocol/index.js'
import { AgentClient, StdioChannel, waitForAgent } from '../src/sandbox/index.js'

/**
 * `node <nodeArguments>` started as a stdio agent, as a container's entry
 * starts it (its write root `dir`): its health answer's `codeCache`, a
 * command's exit code, and its log.
 */
export async function startStdioAgent(
  nodeArguments: readonly string[],
  dir: string,
): Promise<{
  codeCache: string | undefined
  exitCode: number
  log: string
}> {
  const secret = newAgentSecret()
  const child = spawn(process.execPath, [...nodeArguments], {
    cwd: dir,
    env: {
      PATH: '/usr/bin:/bin',
      CORDON_AGENT_LISTEN: 'stdio',
      CORDON_AGENT_SECRET_STDIN: '1',
      CORDON_AGENT_WRITE_ROOTS: dir,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const channel = new StdioChannel({
    fromAgent: child.stdout,
    toAgent: child.stdin,
    agentLog: child.stderr,
    closeCarrier: () => child.stdin.end(),
  })
  channel.sendPreface(`${secret}\n`)
  const client = new AgentClient({
    secret,
    description: 'agent started as a container starts it',
    dial: async (_attempt, kind) => channel.open({ kind }),
  })
  try {
    const health = await waitForAgent(client, 'loader-test', AbortSignal.timeout(20_000))
    const session = await client.startExec(
      { command: 'true', args: [], env: { PATH: '/usr/bin:/bin' }, cwd: dir, stdin: false },
      { onStdout: () => {}, onStderr: () => {} },
    )
    const exit = await session.result
    return { codeCache: health.codeCache, exitCode: exit.exitCode, log: channel.log }
  } finally {
    client.close()
    channel.close()
    if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve))
  }
}
