import { SandboxAbortedError, SandboxCreateTimeoutError, SandboxImagePullError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { reportError } from '../src/cli/report-error.js'

function reported(error: unknown): string[] {
  const lines: string[] = []
  reportError(error, (line) => lines.push(line))
  return lines
}

describe('reportError', () => {
  it('names the error code of a cordon error', () => {
    expect(reported(new SandboxAbortedError('image pull'))).toEqual([
      'cordon: image pull was aborted [ABORTED]',
    ])
  })

  it('points a create that ran out of time pulling its image at cordon prepare --image', () => {
    // The phase as the Docker backend names it (its test/image-pull.test.ts pins it).
    const image = '127.0.0.1:5000/team/large:2'
    expect(reported(new SandboxCreateTimeoutError(30_000, `pulling the image ${image}`))).toEqual([
      `cordon: Sandbox was not ready within 30000 ms (during pulling the image ${image}) [CREATE_TIMEOUT]`,
      `cordon: pull it with no deadline first: cordon prepare --image ${image} (or give the sandbox longer to start with --ready-timeout)`,
    ])
  })

  it('adds nothing to a create that ran out of time in another step, or a failed pull', () => {
    expect(reported(new SandboxCreateTimeoutError(30_000, 'starting the agent'))).toHaveLength(1)
    expect(
      reported(new SandboxImagePullError('a:1', 'docker.io', 'container:docker', 'not found')),
    ).toHaveLength(1)
  })
})
