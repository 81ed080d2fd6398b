import { SandboxBackendUnavailableError } from '@cordon/sandbox'
import { describe, expect, it } from 'vitest'
import { clientFailure } from '../src/client-failure.js'

describe("the service's answer to a failure of its own", () => {
  it('is 500 with the error name and code, and nothing that names the host', () => {
    const engineDown = new SandboxBackendUnavailableError(
      'container:docker',
      'The Docker Engine at unix:///var/run/docker.sock is unreachable (ENOENT).',
      { cause: new Error('connect ENOENT /var/run/docker.sock') },
    )
    expect(clientFailure(engineDown)).toEqual({
      status: 500,
      body: {
        error: 'the task could not be run',
        name: 'SandboxBackendUnavailableError',
        code: 'BACKEND_UNAVAILABLE',
      },
    })
    expect(clientFailure(new Error('at /home/me/service/dist/main.js:12:3'))).toEqual({
      status: 500,
      body: { error: 'the task could not be run' },
    })
  })
})
