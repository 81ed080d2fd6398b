import { SandboxBackendUnavailableError } from '@cordon/core'
import { BUSYBOX_IMAGE } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { collectGarbage, connectEngine, prepareAgentRuntime } from '../src/index.js'
import { testProvider } from './test-run.js'

/** Runs `body` with DOCKER_HOST set as a person might have left it. */
async function withDockerHost<T>(value: string, body: () => Promise<T>): Promise<T> {
  const before = process.env.DOCKER_HOST
  process.env.DOCKER_HOST = value
  try {
    return await body()
  } finally {
    if (before === undefined) delete process.env.DOCKER_HOST
    else process.env.DOCKER_HOST = before
  }
}

const unavailable = (error: unknown): string => {
  expect(SandboxBackendUnavailableError.isInstance(error), String(error)).toBe(true)
  return (error as Error).message
}

describe('an engine that cannot be reached', () => {
  it('named by a DOCKER_HOST that does not resolve: create says so, naming DOCKER_HOST and the engine', async () => {
    const message = await withDockerHost('bogus', async () => {
      const provider = testProvider({ sweepDeadOwners: false })
      try {
        return unavailable(await provider.create().catch((caught: unknown) => caught))
      } finally {
        await provider.close()
      }
    })
    // EAI_AGAIN where the machine has no resolver to ask.
    expect(message).toMatch(
      /^The Docker Engine at DOCKER_HOST=bogus is unreachable \((ENOTFOUND|EAI_AGAIN): its host name does not resolve\)\. Is dockerd running there, and may this process use it\?$/,
    )
  })

  it('is reported the same way by garbage collection and prepare, for a bad socket and for DOCKER_HOST', async () => {
    const socket = connectEngine({ socketPath: '/nonexistent/docker.sock' })
    expect(
      unavailable(
        await collectGarbage({ docker: socket.docker, engine: socket.description }).catch(
          (caught: unknown) => caught,
        ),
      ),
    ).toBe(
      'The Docker Engine at unix:///nonexistent/docker.sock is unreachable (ENOENT). Is dockerd running there, and may this process use it?',
    )
    const named = connectEngine({}, { DOCKER_HOST: 'unix:///nonexistent/docker.sock' })
    expect(
      unavailable(
        await collectGarbage({ docker: named.docker, engine: named.description }).catch(
          (caught: unknown) => caught,
        ),
      ),
    ).toContain('The Docker Engine at DOCKER_HOST=unix:///nonexistent/docker.sock is unreachable')
    const prepared = await withDockerHost('tcp://bogus:2375', () =>
      prepareAgentRuntime({ image: BUSYBOX_IMAGE }).catch((caught: unknown) => caught),
    )
    expect(unavailable(prepared)).toMatch(
      /^The Docker Engine at DOCKER_HOST=tcp:\/\/bogus:2375 is unreachable \((ENOTFOUND|EAI_AGAIN)/,
    )
  })

  it('refuses a DOCKER_HOST that names no address, with the same error', async () => {
    const caught = await withDockerHost('::', async () => {
      try {
        connectEngine({})
      } catch (error) {
        return error
      }
    })
    expect(unavailable(caught)).toMatch(/^DOCKER_HOST=:: names no Docker Engine/)
  })
})
