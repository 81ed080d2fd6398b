import { chownSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { CredentialStore, composeProvider, prepareProviderConfig } from '../src/backend-kit.js'
import { decodeCredential, encodeCredential } from '../src/credential-store.js'
import {
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  SandboxNotFoundError,
} from '../src/index.js'
import { RECORDING, RecordingBackend, type RecordingProviderConfig } from './memory-backend.js'

const directories: string[] = []
afterEach(() => {
  for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true })
})
function scratch(): string {
  const directory = mkdtempSync(join(tmpdir(), 'cordon-store-test-'))
  directories.push(directory)
  return directory
}

describe('the credential store', () => {
  it('keeps one 0600 file per sandbox in a 0700 directory it makes, and removes it', () => {
    const store = new CredentialStore(join(scratch(), 'state', 'credentials'))
    store.save({
      sandboxId: 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa',
      backend: 'b:x',
      endsAt: 1,
      credential: 'c',
    })
    expect(statSync(store.directory).mode & 0o777).toBe(0o700)
    const file = join(store.directory, 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa.json')
    expect(statSync(file).mode & 0o777).toBe(0o600)
    expect(store.load('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa')?.credential).toBe('c')
    store.remove('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa')
    expect(store.load('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa')).toBeUndefined()
    expect(readdirSync(store.directory)).toEqual([])
  })

  it('prunes the credentials of sandboxes past their end or known to be gone; a dry run removes nothing', () => {
    const store = new CredentialStore(scratch())
    const now = Date.now()
    const ids = [
      'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa',
      'sbx_bbbbbbbbbbbbbbbbbbbbbbbbbb',
      'sbx_cccccccccccccccccccccccccc',
    ] as const
    store.save({ sandboxId: ids[0], backend: 'b:x', endsAt: now - 1, credential: 'ended' })
    store.save({ sandboxId: ids[1], backend: 'b:x', endsAt: now + 60_000, credential: 'gone' })
    store.save({ sandboxId: ids[2], backend: 'b:x', endsAt: now + 60_000, credential: 'live' })
    const gone = (id: string) => id === ids[1]
    expect(store.prune(now, gone, true).sort()).toEqual([ids[0], ids[1]])
    expect(readdirSync(store.directory)).toHaveLength(3)
    expect(store.prune(now, gone).sort()).toEqual([ids[0], ids[1]])
    expect(readdirSync(store.directory)).toEqual([`${ids[2]}.json`])
  })

  it('refuses a directory another user owns: its owner could read what is kept there', () => {
    const directory = scratch()
    chownSync(directory, 65534, 65534)
    const store = new CredentialStore(directory)
    const refused = (() => {
      try {
        store.save({
          sandboxId: 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa',
          backend: 'b:x',
          endsAt: 1,
          credential: 'c',
        })
      } catch (error) {
        return error
      }
    })()
    expect(SandboxConfigValidationError.isInstance(refused)).toBe(true)
    expect((refused as SandboxConfigValidationError).issues[0]?.path).toBe('credentialStore')
  })

  it('tightens a directory others may enter', () => {
    const directory = scratch()
    const store = new CredentialStore(directory)
    store.save({
      sandboxId: 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa',
      backend: 'b:x',
      endsAt: 1,
      credential: 'c',
    })
    expect(statSync(directory).mode & 0o077).toBe(0)
  })

  it('a credential is refused for another sandbox or backend, and when it is not one cordon made', () => {
    const credential = encodeCredential({
      sandboxId: 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa',
      backend: 'b:x',
      secret: 's',
      endsAt: 1,
    })
    expect(decodeCredential(credential, 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'b:x').secret).toBe('s')
    for (const [text, id, backend] of [
      [credential, 'sbx_bbbbbbbbbbbbbbbbbbbbbbbbbb', 'b:x'],
      [credential, 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'b:y'],
      ['password', 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'b:x'],
      ['cordon-credential-v1.not-json', 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'b:x'],
    ] as const) {
      const error = (() => {
        try {
          decodeCredential(text, id, backend)
        } catch (caught) {
          return caught
        }
      })()
      expect(SandboxCredentialRefusedError.isInstance(error)).toBe(true)
    }
  })
})

describe('detached sandboxes (the provider side, on a backend that declares no reconnect)', () => {
  const provider = () =>
    composeProvider({
      ...prepareProviderConfig(
        {
          backend: { tier: 'test' },
          layout: { outputs: { source: { type: 'ephemeral' } } },
          credentialStore: scratch(),
        } as RecordingProviderConfig,
        [RECORDING],
      ),
      loadBackend: async () => new RecordingBackend(),
    })

  it('refuses detached and connect naming the control and the backend; lists its own live sandboxes', async () => {
    const host = provider()
    const detached = await host
      .create({ detached: true, lifetimeMs: 1000 })
      .catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(detached)).toBe(true)
    expect((detached as SandboxControlRefusedError).control).toBe('detached')
    expect((detached as SandboxControlRefusedError).backend).toBe('test:recording')
    const connected = await host
      .connect('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa')
      .catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(connected)).toBe(true)
    expect((connected as SandboxControlRefusedError).control).toBe('connect')
    const sandbox = await host.create()
    expect(await host.list()).toEqual([
      expect.objectContaining({ id: sandbox.id, status: 'running', detached: false }),
    ])
    await host.close()
  })

  it('detached needs a lifetime (a typed error naming lifetimeMs) and connect a sandbox id', async () => {
    const host = composeProvider({
      ...prepareProviderConfig(
        {
          backend: { tier: 'test' },
          layout: { outputs: { source: { type: 'ephemeral' } } },
          credentialStore: false,
        } as RecordingProviderConfig,
        [RECORDING],
      ),
      definition: { ...RECORDING, enforcement: { ...RECORDING.enforcement, reconnect: true } },
      loadBackend: async () => new RecordingBackend(),
    })
    const error = await host.create({ detached: true }).catch((caught: unknown) => caught)
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    expect((error as SandboxConfigValidationError).issues[0]?.path).toBe('lifetimeMs')
    const notAnId = await host.connect('my-sandbox').catch((caught: unknown) => caught)
    expect(SandboxNotFoundError.isInstance(notAnId)).toBe(true)
    const noCredential = await host
      .connect('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa')
      .catch((caught: unknown) => caught)
    expect(SandboxCredentialRefusedError.isInstance(noCredential)).toBe(true)
    expect((noCredential as Error).message).toMatch(/credentialStore: false/)
    await host.close()
  })
})
