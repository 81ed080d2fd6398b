import { startTestOrchestrator, type TestOrchestratorStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMicroVMSandboxProvider } from '../src/index.js'

/**
 * Sandbox code against its own guest's agent (README: guest requirements).
 * Run as the sandbox: find the agent's process, then try what would let it
 * impersonate the agent (read its memory or environment for the secret,
 * signal it, replace its socket in the run directory). Each line is
 * `<attempt> <outcome>`, the outcome an error code or `allowed`.
 */
const PROBE = `
const fs = require('node:fs')
const agent = fs.readdirSync('/proc').filter((name) => /^\\d+$/.test(name)).find((pid) => {
  try { return fs.readFileSync('/proc/' + pid + '/cmdline', 'utf8').includes('cordon-agent') } catch { return false }
})
if (agent === undefined) { console.log('agent-not-found'); process.exit(1) }
const attempt = (name, operation) => {
  try { operation(); console.log(name + ' allowed') } catch (error) { console.log(name + ' ' + error.code) }
}
console.log('agent-uid ' + fs.statSync('/proc/' + agent).uid)
console.log('own-uid ' + process.getuid())
attempt('mem', () => { const fd = fs.openSync('/proc/' + agent + '/mem', 'r'); fs.closeSync(fd) })
attempt('environ', () => fs.readFileSync('/proc/' + agent + '/environ'))
// Signal 0 makes the kernel's permission check for a signal and delivers nothing.
attempt('signal', () => process.kill(Number(agent), 0))
attempt('list-run', () => fs.readdirSync('/run/cordon'))
attempt('rename-socket', () => fs.renameSync('/run/cordon/agent.sock', '/run/cordon/moved.sock'))
attempt('write-run', () => fs.writeFileSync('/run/cordon/agent.sock.new', 'x'))
`

describe("sandbox code cannot reach its guest's agent (orchestrator stand-in)", () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it("runs commands under a per-sandbox uid that cannot read the agent's memory or environment, signal it, or touch /run/cordon", async () => {
    const provider = createMicroVMSandboxProvider({ backend: standin.backendConfig() })
    const first = await provider.create()
    const second = await provider.create()
    try {
      const outcome = async (sandbox: typeof first) => {
        const result = await sandbox.exec('node', ['-e', PROBE])
        expect(result.stderr).toBe('')
        return Object.fromEntries(
          result.stdout
            .trim()
            .split('\n')
            .map((line) => line.split(' ') as [string, string]),
        )
      }
      const seen = await outcome(first)
      expect(seen['agent-uid']).toBe('0')
      expect(seen['own-uid']).not.toBe('0')
      // No host account: far above any uid a host or image defines.
      expect(Number(seen['own-uid'])).toBeGreaterThanOrEqual(2 ** 30)
      expect(seen).toMatchObject({
        mem: 'EACCES',
        environ: 'EACCES',
        signal: 'EPERM',
        'list-run': 'EACCES',
        'rename-socket': 'EACCES',
        'write-run': 'EACCES',
      })
      // Guests do not share the sandbox user.
      expect((await outcome(second))['own-uid']).not.toBe(seen['own-uid'])
      // The agent is untouched: the host still reaches it.
      expect((await first.exec('true', [])).exitCode).toBe(0)
    } finally {
      await first.destroy()
      await second.destroy()
    }
  })
})
