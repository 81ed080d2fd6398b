/**
 * The agent program. Bundled into dist/cordon-agent.mjs, the one file a guest
 * image needs (plus a `node` binary). Configuration comes from `CORDON_AGENT_*`
 * environment variables (see agent-config.ts and the README).
 *
 * Signals: SIGHUP is the resume signal (re-seed, re-read the secret, listen
 * again); SIGTERM and SIGINT stop the agent.
 */
import { AgentConfigError, readAgentConfig } from './agent-config.js'
import { AGENT_VERSION } from './agent-connection.js'
import { startAgent } from './agent-server.js'

async function main(): Promise<void> {
  if (process.argv.includes('--version')) {
    process.stdout.write(`${AGENT_VERSION}\n`)
    return
  }
  const config = readAgentConfig(process.env)
  const agent = await startAgent(config)
  if (config.lifetimeMs !== undefined) {
    setTimeout(() => {
      config.log('info', 'lifetime reached; stopping', { lifetimeMs: config.lifetimeMs })
      void agent.close().finally(() => process.exit(0))
    }, config.lifetimeMs)
  }
  let resuming = Promise.resolve()
  process.on('SIGHUP', () => {
    resuming = resuming
      .then(() => agent.resume())
      .catch((error: unknown) => {
        config.log('error', 'resume failed', { error: (error as Error).message })
        process.exitCode = 1
        void agent.close().finally(() => process.exit(1))
      })
  })
  const stop = (): void => {
    void agent.close().finally(() => process.exit(0))
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

main().catch((error: unknown) => {
  const message =
    error instanceof AgentConfigError
      ? error.message
      : `agent failed to start: ${(error as Error)?.stack ?? error}`
  process.stderr.write(`${message}\n`)
  process.exit(2)
})
