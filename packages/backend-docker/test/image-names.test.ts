import { SandboxError, SandboxImagePullError, SandboxOperationError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { isCordonTestImage, parseImageReference } from '../src/image-reference.js'
import { ImageBuildError } from '../src/index.js'
import { PullProgress } from '../src/pull-progress.js'
import { engineAuthFor, engineRegistryConfig } from '../src/registry-auth.js'

describe('image names', () => {
  it('finds the registry the engine would pull from, and pulls one tag', () => {
    const cases: Array<[string, string, string]> = [
      ['node:20-slim', 'docker.io', 'node:20-slim'],
      ['node', 'docker.io', 'node:latest'],
      ['team/tool', 'docker.io', 'team/tool:latest'],
      ['ghcr.io/team/tool:1', 'ghcr.io', 'ghcr.io/team/tool:1'],
      ['127.0.0.1:5000/team/tool', '127.0.0.1:5000', '127.0.0.1:5000/team/tool:latest'],
      ['localhost/tool:2', 'localhost', 'localhost/tool:2'],
      [
        'Registry.Example.com:5000/a/b:c',
        'registry.example.com:5000',
        'Registry.Example.com:5000/a/b:c',
      ],
      ['index.docker.io/library/node:20', 'docker.io', 'index.docker.io/library/node:20'],
      [`node@sha256:${'a'.repeat(64)}`, 'docker.io', `node@sha256:${'a'.repeat(64)}`],
    ]
    for (const [name, registry, pullName] of cases) {
      expect(parseImageReference(name), name).toEqual({ name, registry, pullName })
    }
  })

  it("knows cordon's own test images only on Docker Hub", () => {
    expect(isCordonTestImage(parseImageReference('cordon-test/busybox:latest'))).toBe(true)
    expect(isCordonTestImage(parseImageReference('docker.io/cordon-test/node'))).toBe(true)
    expect(isCordonTestImage(parseImageReference('127.0.0.1:5000/cordon-test/pulled:1'))).toBe(
      false,
    )
    expect(isCordonTestImage(parseImageReference('node:20-slim'))).toBe(false)
  })

  it("gives the engine only the image's own registry's credential", () => {
    const auth = {
      'Docker.io': { username: 'hub', password: 'p1' },
      'ghcr.io': { username: 'gh', password: 'p2' },
    }
    expect(engineAuthFor(auth, 'ghcr.io')).toEqual({
      username: 'gh',
      password: 'p2',
      serveraddress: 'ghcr.io',
    })
    expect(engineAuthFor(auth, 'docker.io')?.serveraddress).toBe('https://index.docker.io/v1/')
    expect(engineAuthFor(auth, 'quay.io')).toBeUndefined()
    expect(Object.keys(engineRegistryConfig(auth) ?? {})).toEqual([
      'https://index.docker.io/v1/',
      'ghcr.io',
    ])
    expect(engineRegistryConfig(undefined)).toBeUndefined()
  })
})

describe('pull progress', () => {
  it('counts layers and bytes from the engine messages', () => {
    const progress = new PullProgress()
    const messages = [
      { status: 'Pulling from team/tool', id: '1' },
      { status: 'Already exists', id: 'a' },
      { status: 'Pulling fs layer', id: 'b' },
      { status: 'Pulling fs layer', id: 'c' },
      { status: 'Downloading', id: 'b', progressDetail: { current: 100, total: 1000 } },
      { status: 'Downloading', id: 'c', progressDetail: { current: 5, total: 10 } },
      { status: 'Download complete', id: 'c' },
      { status: 'Pull complete', id: 'c' },
      { status: 'Digest: sha256:abc' },
    ]
    const changed = messages.map((message) => progress.take(message))
    expect(changed).toEqual([false, true, true, true, true, true, true, true, false])
    expect(progress.current).toEqual({
      layers: 3,
      layersDone: 2,
      downloadedBytes: 110,
      totalBytes: 1010,
    })
  })
})

describe('ImageBuildError', () => {
  const cause = new Error('engine said no')
  const error = new ImageBuildError(
    'tools:1',
    'returned a non-zero code: 3',
    { step: 4, instruction: 'RUN make', output: ['make: *** [all] Error 3'] },
    { cause },
  )

  it('is an operation error with its fields and cause', () => {
    expect(error).toBeInstanceOf(Error)
    expect(SandboxError.isInstance(error)).toBe(true)
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect(ImageBuildError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({
      name: 'ImageBuildError',
      code: 'OPERATION_FAILED',
      operation: 'buildImage',
      image: 'tools:1',
      step: 4,
      instruction: 'RUN make',
      output: ['make: *** [all] Error 3'],
    })
    expect(error.cause).toBe(cause)
    expect(error.message).toBe(
      'buildImage failed: tools:1 (step 4: RUN make): returned a non-zero code: 3',
    )
  })

  it('is not matched by its siblings or by non-errors, nor matches them', () => {
    const pull = new SandboxImagePullError('a', 'docker.io', 'container:docker', 'no')
    expect(ImageBuildError.isInstance(pull)).toBe(false)
    expect(SandboxImagePullError.isInstance(error)).toBe(false)
    expect(ImageBuildError.isInstance(new SandboxOperationError('buildImage', 'x'))).toBe(false)
    for (const value of [null, undefined, 'error', {}, new Error('plain')]) {
      expect(ImageBuildError.isInstance(value)).toBe(false)
    }
  })
})
