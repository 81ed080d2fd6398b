/**
 * An agent with no container or guest around it (a local process) must take
 * with it, when it stops, every process its commands left running: a
 * finished command's background child, a `setsid` grandchild.
 */
import { afterEach, describe, expect, it } from 'vitest'
import {
  type AgentUnderTest,
  processesMatching,
  processesOnce,
  runCommand,
  startAgentProcess,
} from './agent-harness.js'

describe('the agent stopping', () => {
  let agent: AgentUnderTest | undefined
  afterEach(async () => {
    await agent?.stop()
    agent = undefined
  })

  it('kills what finished commands left running, setsid grandchildren included', async () => {
    agent = await startAgentProcess()
    const needle = `${Math.floor(Math.random() * 1e6) + 1e6}`
    const background = await runCommand(agent, 'sh', [
      '-c',
      `sleep 1${needle} >/dev/null 2>&1 & setsid sleep 2${needle} >/dev/null 2>&1 & exit 0`,
    ])
    expect(background.exit.exitCode).toBe(0)
    // The command has ended; what it started lives on (once each child has
    // exec'd `sleep`, it no longer carries the shell's line, which names both).
    const one = (pids: readonly number[]) => pids.length === 1
    expect(await processesOnce(`sleep 1${needle}`, one)).toHaveLength(1)
    expect(await processesOnce(`sleep 2${needle}`, one)).toHaveLength(1)

    await agent.stop()
    agent = undefined
    expect(await processesMatching(`sleep 1${needle}`)).toEqual([])
    expect(await processesMatching(`sleep 2${needle}`)).toEqual([])
  })
})
