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
    ['a number as content', { path: 'b', content: 42 }, ['files.1.content']],
    ['null as content', { path: 'b', content: null }, ['files.1.content']],
    ['no content and no hostPath', { path: 'b' }, ['files.1.content']],
    ['a set-uid mode', { path: 'b', content: 'x', mode: 0o4755 }, ['files.1.mode']],
    [
      'a sticky mode on a host file',
      { path: 'b', hostPath: '/etc/hostname', mode: 0o1777 },
      ['files.1.mode'],
    ],
    ['a mode as a string', { path: 'b', content: 'x', mode: '644' }, ['files.1.mode']],
    ['an unknown key', { path: 'b', content: 'x', modee: 0o644 }, ['files.1']],
    ['a number as hostPath', { path: 'b', hostPath: 7 }, ['files.1.hostPath']],
    ['a number as path', { path: 1, content: 'x' }, ['files.1.path']],
    ['a string as the entry', 'b', ['files.1']],
  ])(
    'writeFiles refuses the whole batch for an entry with %s, naming it, and writes nothing',
    async (_, entry, paths) => {
      const { sandbox, backend, provider } = await sandboxAndBackend()
      const files = [{ path: 'a', content: 'fine' }, entry, { path: 'c', content: 'fine' }]
      expect(await issuesOf(sandbox.writeFiles!(files as never))).toEqual(paths)
      expect(backend.fileCalls).toEqual([])
      await provider.close()
    },
  )

  it('writeFiles refuses a batch that is not an array, and malformed options', async () => {
    const { sandbox, backend, provider } = await sandboxAndBackend()
    expect(await issuesOf(sandbox.writeFiles!({ path: 'a', content: 'x' } as never))).toEqual([
      'files',
    ])
    expect(
      await issuesOf(sandbox.writeFiles!([{ path: 'a', content: 'x' }], { mode: 0o644 } as never)),
    ).toEqual(['options'])
    expect(backend.fileCalls).toEqual([])
    await sandbox.writeFiles!(
      [
        { path: 'a', content: 'text', mode: 0o755 },
        { path: 'b', content: Buffer.from('bytes') },
        { path: 'c', hostPath: '/etc/hostname', mode: 0o600 },
      ],
      { signal: new AbortController().signal },
    )
    expect(backend.fileCalls).toEqual(['writeFiles a b c'])
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
