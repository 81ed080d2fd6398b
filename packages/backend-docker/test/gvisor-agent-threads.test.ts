import { describe, expect, it } from 'vitest'
import { GVISOR_AGENT_POOL_THREADS } from '../src/gvisor-agent-threads.js'
import { engineExec } from './engine-exec.js'
import { testProvider } from './test-run.js'

/** Runs a shell line as root inside the container, past the agent, and returns its output. */
async function rootShell(containerName: string, line: string): Promise<string> {
  return (await engineExec(containerName, ['sh', '-c', line], { user: '0' })).output
}

/** The agent's thread count, read as root from /proc inside the sandbox (its process is Node's loader). */
async function agentThreads(containerName: string): Promise<number> {
  const lines = await rootShell(
    containerName,
    'for f in /proc/[0-9]*/status; do grep -E "^(Name|Threads):" "$f" | tr "\\n" " "; echo; done',
  )
  const agent = lines
    .split('\n')
    .map((line) => /Name:\s+(\S+).*Threads:\s+(\d+)/.exec(line))
    .find((match) => match && /^(node|ld-linux)/.test(match[1]!))
  if (!agent) throw new Error(`no agent process in:\n${lines}`)
  return Number(agent[2])
}

describe('the agent under gVisor runs with fewer threads (each identity switch is broadcast to every thread)', () => {
  it('one V8 worker and one libuv pool thread under runsc, after files and a command; commands do not inherit the pool size', async () => {
    const gvisor = testProvider({ runtime: 'runsc' })
    const runc = testProvider({ runtime: 'runc' })
    try {
      const [sandbox, plain] = await Promise.all([gvisor.create(), runc.create()])
      for (const box of [sandbox, plain]) {
        // Starts libuv's pool (the read streams through it) and the launcher.
        await box.writeFile('/mnt/user-data/outputs/a', Buffer.alloc(256 * 1024, 1))
        expect((await box.readFile('/mnt/user-data/outputs/a')).length).toBe(256 * 1024)
        expect((await box.exec('true')).exitCode).toBe(0)
      }
      const fewer = await agentThreads(`cordon-${sandbox.id}`)
      const defaults = await agentThreads(`cordon-${plain.id}`)
      // Node 20 keeps its main thread, the one V8 worker, the one pool thread and two of its own.
      expect(fewer).toBeLessThanOrEqual(4 + GVISOR_AGENT_POOL_THREADS)
      // Under runc the defaults stay: 4 V8 workers and 4 pool threads.
      expect(defaults).toBeGreaterThanOrEqual(fewer + 6)
      const env = await sandbox.exec('env')
      expect(env.stdout).not.toMatch(/UV_THREADPOOL_SIZE|CORDON_AGENT_/)
    } finally {
      await Promise.all([gvisor.close(), runc.close()])
    }
  })
})
