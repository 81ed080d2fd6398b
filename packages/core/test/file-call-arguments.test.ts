import { describe, expect, it } from 'vitest'
import { composeProvider, prepareProviderConfig } from '../src/backend-kit.js'
import { SandboxConfigValidationError } from '../src/index.js'
import { RECORDING, RecordingBackend, type RecordingProviderConfig } from './memory-backend.js'

async function sandboxAndBackend() {
  const backend = new RecordingBackend()
  const provider = composeProvider({
    ...prepareProviderConfig(
      {
        backend: { tier: 'test' },
        layout: { outputs: { source: { type: 'ephemeral' } } },
      } as RecordingProviderConfig,
      [RECORDING],
    ),
    loadBackend: async () => backend,
  })
  return { sandbox: await provider.create(), backend, provider }
}

async function issuesOf(call: Promise<unknown>): Promise<string[]> {
  const error = await call.then(
    () => undefined,
    (caught: unknown) => caught,
  )
  expect(SandboxConfigValidationError.isInstance(error), String(error)).toBe(true)
  return (error as SandboxConfigValidationError).issues.map((issue) => issue.path)
}

describe('file call arguments are checked before anything is sent', () => {
  it.each([
    ['a number', 42],
    ['an object', { a: 1 }],
    ['null', null],
    ['undefined', undefined],
    ['an array', ['text']],
  ])('writeFile refuses %s as content, naming content, and writes nothing', async (_, content) => {
    const { sandbox, backend, provider } = await sandboxAndBackend()
    expect(await issuesOf(sandbox.writeFile('a.txt', content as unknown as string))).toEqual([
      'content',
    ])
    expect(backend.fileCalls).toEqual([])
    await provider.close()
  })

  it('writeFile takes a string, a Buffer and a Uint8Array', async () => {
    const { sandbox, backend, provider } = await sandboxAndBackend()
    await sandbox.writeFile('a', 'text')
    await sandbox.writeFile('b', Buffer.from('bytes'))
    await sandbox.writeFile('c', new Uint8Array([1]), {
      mode: 0o755,
      signal: AbortSignal.timeout(60_000),
    })
    expect(backend.fileCalls).toEqual(['writeFile a', 'writeFile b', 'writeFile c'])
    await provider.close()
  })

  it.each([
    [{ mode: 0o4755 }, 'options.mode'],
    [{ mode: 0o1777 }, 'options.mode'],
    [{ mode: 1.5 }, 'options.mode'],
    [{ mode: '644' }, 'options.mode'],
    [{ mode: -1 }, 'options.mode'],
    [{ size: -1 }, 'options.size'],
    [{ modee: 0o644 }, 'options'],
    [{ signal: 'now' }, 'options.signal'],
  ])('writeFile refuses options %j, naming %s', async (options, path) => {
    const { sandbox, backend, provider } = await sandboxAndBackend()
    expect(await issuesOf(sandbox.writeFile('a', 'x', options as never))).toEqual([path])
    expect(
      await issuesOf(sandbox.writeFileStream('a', (async function* () {})(), options as never)),
    ).toEqual([path])
    expect(backend.fileCalls).toEqual([])
    await provider.close()
  })

  it.each([
    [{ maxBytes: -1 }, 'options.maxBytes'],
    [{ maxBytes: Number.NaN }, 'options.maxBytes'],
    [{ maxBytes: 1.5 }, 'options.maxBytes'],
    [{ max: 10 }, 'options'],
  ])('readFile refuses options %j, naming %s', async (options, path) => {
    const { sandbox, backend, provider } = await sandboxAndBackend()
    expect(await issuesOf(sandbox.readFile('a', options as never))).toEqual([path])
    expect(backend.fileCalls).toEqual([])
    await provider.close()
  })

  it('listFiles refuses an unknown option, and takes a signal', async () => {
    const { sandbox, backend, provider } = await sandboxAndBackend()
    expect(await issuesOf(sandbox.listFiles(undefined, { recursive: true } as never))).toEqual([
      'options',
    ])
    expect(backend.fileCalls).toEqual([])
    await sandbox.listFiles(undefined, { signal: new AbortController().signal })
    await sandbox.readFile('a', { maxBytes: 0 })
    expect(backend.fileCalls).toHaveLength(2)
    await provider.close()
  })
})
