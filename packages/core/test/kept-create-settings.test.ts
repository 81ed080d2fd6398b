import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import {
  composeProvider,
  prepareProviderConfig,
  type SandboxBackendConnectRequest,
} from '../src/backend-kit.js'
import { decodeCredential, encodeCredential } from '../src/credential-store.js'
import {
  type CordonBackendSandbox,
  type SandboxBackendOptions,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
} from '../src/index.js'
import { keepCreateSettings } from '../src/kept-create-settings.js'
import {
  RecordingBackend,
  type RecordingProviderConfig,
  recordingDefinition,
} from './memory-backend.js'

const directories: string[] = []
afterEach(() => {
  for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true })
})

/** What the backend fixed as a detached sandbox's end time (its label, on a real engine). */
const LABELLED_END = Date.now() + 60_000

/**
 * Two providers sharing one credential store over one stand-in backend that
 * declares reconnect and snapshots: what the creator makes, the other
 * connects to. The backend's connected sandbox knows nothing of the
 * creator's request but what it reports enforcing (`reported`), as a real
 * backend's connect knows only the engine and its own reconnect state.
 */
function twoHosts(reported: CordonBackendSandbox['enforcement']['egress']) {
  const directory = mkdtempSync(join(tmpdir(), 'cordon-kept-settings-'))
  directories.push(directory)
  const definition = recordingDefinition({ reconnect: true, snapshot: true })
  const backend = new RecordingBackend(definition)
  const connects: SandboxBackendConnectRequest[] = []
  const create = backend.create.bind(backend)
  const decorate = (made: CordonBackendSandbox, detached: boolean): CordonBackendSandbox =>
    Object.assign(made, {
      snapshot: async () => ({
        id: 'snp_bbbbbbbbbbbbbbbbbbbbbbbbbb',
        createdAt: Date.now(),
        sizeBytes: 1,
        memory: false,
        backend: backend.name,
        sourceSandboxId: made.id,
        limits: made.enforcement.limits,
        egress: made.enforcement.egress,
      }),
      ...(detached
        ? { reconnectSecret: 'secret', endsAt: LABELLED_END, disconnect: async () => {} }
        : {}),
    })
  backend.create = async (options: SandboxBackendOptions) =>
    decorate(await create(options), options.detached === true)
  Object.assign(backend, {
    snapshots: { get: async () => undefined, list: async () => [], remove: async () => {} },
    connect: async (request: SandboxBackendConnectRequest) => {
      connects.push(request)
      const made = await create({ sandboxId: request.sandboxId, workingDirectory: '.' })
      return {
        sandbox: decorate(
          Object.assign(made, { enforcement: { ...made.enforcement, egress: reported } }),
          true,
        ),
        endsAt: LABELLED_END,
      }
    },
  })
  const host = () =>
    composeProvider({
      ...prepareProviderConfig(
        {
          backend: { tier: 'test' },
          layout: { outputs: { source: { type: 'ephemeral' } } },
          credentialStore: directory,
        } as RecordingProviderConfig,
        [definition],
      ),
      loadBackend: async () => backend,
    })
  return { backend, connects, creator: host(), other: host() }
}

/** A backend request without what differs between any two creates (its id, snapshot, signal). */
function settingsOf(request: SandboxBackendOptions | undefined) {
  const {
    sandboxId: _id,
    snapshot: _snapshot,
    signal: _signal,
    onStep: _step,
    ...rest
  } = request ?? ({} as SandboxBackendOptions)
  return rest
}

const CREATE = {
  detached: true,
  lifetimeMs: 90_000,
  timeoutMs: 4_000,
  env: { TOKEN: 'creator-only' },
  memoryLimitMb: 160,
  maxProcesses: 48,
  workingDirectory: 'work',
  egress: { kind: 'static', allowedHosts: ['upstream.test'] },
} as const

describe('what a detached sandbox keeps of its create (the provider side)', () => {
  it("a fork of a connected sandbox is asked for exactly what a fork from the creator's handle is; the connected handle has the creator's exec timeout", async () => {
    const { backend, connects, creator, other } = twoHosts({
      kind: 'static',
      allowedHosts: ['upstream.test'],
    })
    const made = await creator.create(CREATE)
    // The end time the backend fixed, not one counted after its create returned.
    expect(made.endsAt).toBe(LABELLED_END)
    await made.fork({ count: 1 })
    const fromCreator = settingsOf(backend.requests.at(-1))
    const connected = await other.connect(made.id)
    expect(connects[0]?.execTimeoutMs).toBe(CREATE.timeoutMs)
    expect(connected.enforced.execTimeoutMs).toBe(CREATE.timeoutMs)
    expect(connected.endsAt).toBe(LABELLED_END)
    await connected.fork({ count: 1 })
    const fromConnected = settingsOf(backend.requests.at(-1))
    expect(fromConnected).toEqual(fromCreator)
    expect(fromConnected).toMatchObject({
      env: CREATE.env,
      memoryLimitMb: CREATE.memoryLimitMb,
      maxProcesses: CREATE.maxProcesses,
      timeoutMs: CREATE.timeoutMs,
      lifetimeMs: CREATE.lifetimeMs,
      workingDirectory: CREATE.workingDirectory,
      egress: CREATE.egress,
    })
    await Promise.all([creator.close(), other.close()])
  })

  it("a resolver's function is not kept: a connected sandbox's forks get the list it reports enforcing, or are refused naming egress before anything is taken", async () => {
    const resolver = { kind: 'resolver', resolve: async () => ['upstream.test'] } as const
    const answered = twoHosts({ kind: 'static', allowedHosts: ['upstream.test'] })
    const made = await answered.creator.create({ ...CREATE, egress: resolver })
    const settings = decodeCredential(made.credential!, made.id, answered.backend.name).settings
    expect(settings).toMatchObject({ env: CREATE.env, timeoutMs: CREATE.timeoutMs })
    expect(settings?.egress).toBeUndefined()
    await (await answered.other.connect(made.id)).fork({ count: 1 })
    expect(answered.backend.requests.at(-1)?.egress).toEqual({
      kind: 'static',
      allowedHosts: ['upstream.test'],
    })

    const unanswered = twoHosts({ kind: 'resolver' })
    const source = await unanswered.creator.create({ ...CREATE, egress: resolver })
    const connected = await unanswered.other.connect(source.id)
    const creates = unanswered.backend.requests.length
    const refused = await connected.fork({ count: 1 }).catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
    expect((refused as SandboxControlRefusedError).control).toBe('egress')
    expect(unanswered.backend.requests.length).toBe(creates)
    await Promise.all([
      answered.creator.close(),
      answered.other.close(),
      unanswered.creator.close(),
      unanswered.other.close(),
    ])
  })

  it('keeps only what the host named of the limits; a credential whose settings are not what cordon keeps is refused', () => {
    const kept = keepCreateSettings({ workingDirectory: '.', lifetimeMs: 1000, timeoutMs: 500 })
    expect(kept).toEqual({ env: {}, workingDirectory: '.', timeoutMs: 500, lifetimeMs: 1000 })
    const id = 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'
    const fields = { sandboxId: id, backend: 'b:x', secret: 's', endsAt: 1 } as const
    expect(decodeCredential(encodeCredential({ ...fields, settings: kept }), id, 'b:x')).toEqual({
      ...fields,
      settings: kept,
    })
    for (const settings of [
      { ...kept, timeoutMs: -1 },
      { ...kept, env: { 'NOT A NAME': 'x' } },
      { ...kept, egress: { kind: 'resolver' } },
      { ...kept, extra: true },
    ]) {
      const text = encodeCredential({ ...fields, settings: settings as never })
      const error = (() => {
        try {
          decodeCredential(text, id, 'b:x')
        } catch (caught) {
          return caught
        }
      })()
      expect(SandboxCredentialRefusedError.isInstance(error)).toBe(true)
    }
  })
})
