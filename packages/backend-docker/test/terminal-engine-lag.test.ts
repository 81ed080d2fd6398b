import { PassThrough } from 'node:stream'
import type { AgentClient } from '@cordon/agent/sandbox'
import { type SandboxId, SandboxOperationError } from '@cordon/core'
import type Docker from 'dockerode'
import { describe, expect, it } from 'vitest'
import { openDockerTerminal } from '../src/docker-terminal.js'

/**
 * The engine handles an exec's exit as an event of its own: on a loaded
 * machine (CI once) its inspect still says "running" for a moment after the
 * program is gone, while a resize already fails because the process stopped.
 * That moment cannot be produced on demand with a real engine, so this engine
 * stands in for it: the program's output ends at once, resize fails as the
 * real engine's does, and inspect lags by `lagInspects` answers.
 */
function laggingEngine(options: { lagInspects: number; exitCode: number; resizeFails: boolean }) {
  let inspects = 0
  const stream = new PassThrough()
  const exec = {
    async start() {
      setImmediate(() => stream.end())
      return stream
    },
    async resize() {
      if (options.resizeFails)
        throw new Error('(HTTP code 500) server error - cannot resize a stopped container: unknown')
    },
    async inspect() {
      inspects++
      return inspects <= options.lagInspects
        ? { Running: true, ExitCode: null }
        : { Running: false, ExitCode: options.exitCode }
    },
  }
  const docker = { getContainer: () => ({ exec: async () => exec }) } as unknown as Docker
  return {
    context: {
      docker,
      containerId: 'c',
      sandboxId: 'sbx_lag' as SandboxId,
      user: { uid: 1000, gid: 1000 },
      env: {},
      workingDirectory: '/workspace',
      agent: {} as AgentClient,
      launcher: undefined,
      backend: 'container:runc',
      gvisor: false,
    },
    get inspects() {
      return inspects
    },
  }
}

describe('a terminal whose program ends before the engine says so', () => {
  it('opens, and reports the exit code the engine gives once it catches up', async () => {
    const engine = laggingEngine({ lagInspects: 3, exitCode: 0, resizeFails: true })
    const terminal = await openDockerTerminal(engine.context, {
      command: 'true',
      size: { cols: 80, rows: 24 },
    })
    expect(await terminal.exited).toBe(0)
    expect(engine.inspects).toBe(4)
    const error = await terminal.write('x').catch((caught: unknown) => caught)
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('(exit code 0)')
  })

  it('a program the engine never reports as ended gets -1, not a hang', async () => {
    const engine = laggingEngine({
      lagInspects: Number.POSITIVE_INFINITY,
      exitCode: 0,
      resizeFails: false,
    })
    const terminal = await openDockerTerminal(engine.context, { size: { cols: 80, rows: 24 } })
    expect(await terminal.exited).toBe(-1)
  })
})
