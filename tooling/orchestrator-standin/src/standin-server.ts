import { randomBytes, timingSafeEqual } from 'node:crypto'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { agentProgramPath } from '@cordon/agent'
import Dockerode from 'dockerode'
import { parseCreateRequest, type ValidCreateRequest } from './create-request.js'
import { GUEST_OUTPUTS_DIR, type Guest, startGuest } from './guest-container.js'
import { captureGuestFilesystem, restoreGuestFilesystem } from './guest-snapshot.js'
import { type MtlsRelayCredentials, startMtlsRelay } from './mtls-relay.js'
import {
  parseSnapshotRequest,
  SANDBOX_ID_PATTERN,
  type StoredSnapshot,
  snapshotKey,
  snapshotView,
} from './snapshot-request.js'
import { startVsockRelay } from './vsock-relay.js'

export const DEFAULT_GUEST_IMAGE = 'cordon-test/node:latest'
const MAX_BODY_BYTES = 64 * 1024

export interface OrchestratorStandinOptions {
  /** The bearer token callers must present. */
  readonly token: string
  readonly docker?: Dockerode
  /** Image of guests created without a template (default cordon-test/node:latest). */
  readonly image?: string
  /** Template name to image; a create naming another template is refused. */
  readonly templates?: Readonly<Record<string, string>>
  /** The bundled agent program mounted into each guest (default: @cordon/agent's). */
  readonly agentProgramPath?: string
  readonly host?: string
  readonly port?: number
  /** Serve the control plane over TLS; with `ca`, client certificates from it are required. */
  readonly tls?: { readonly cert: string; readonly key: string; readonly ca?: string }
  /** Put a client-certificate TLS relay in front of each agent instead of the vsock socket. */
  readonly agentRelay?: MtlsRelayCredentials
  /** Extra labels on every container (e.g. a test run id). */
  readonly labels?: Readonly<Record<string, string>>
  readonly tmpSizeMb?: number
  readonly outputsSizeMb?: number
  readonly cpus?: number
}

export interface OrchestratorStandin {
  readonly url: string
  /** Labels every container of this stand-in carries (`cordon.standin`). */
  readonly id: string
  /** Ids of the guests alive now. */
  guests(): string[]
  /** References (`orgId/agentId/version`) of the snapshots it holds now. */
  snapshots(): string[]
  /** Deletes every guest (and any container labelled with this stand-in), then stops serving. */
  close(): Promise<void>
}

interface GuestRecord {
  readonly request: ValidCreateRequest
  /** The template it runs: the request's, or that of the snapshot it was created from. */
  readonly template: string | undefined
  readonly image: string
  readonly ready: Promise<void>
  readonly createdAt: number
  /** The create's answer (agent endpoint and rootDir), which a GET repeats while the guest runs. */
  answer?: { readonly rootDir: string; readonly agent: Record<string, unknown> }
  guest?: Guest
  relays: Array<{ close(): Promise<void> }>
  lifetime?: ReturnType<typeof setTimeout>
  /** When the lifetime runs out (Date.now()), while it is counting. */
  lifetimeEndsAt?: number
  /** What was left of the lifetime when the guest was paused. */
  lifetimeLeftMs?: number
  paused: boolean
  /** Pause, resume and snapshot of one guest run one after the other. */
  operations: Promise<unknown>
  deleteRequested: boolean
  removal?: Promise<void>
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message)
  }
}

/**
 * A local implementation of the control-plane API in
 * packages/backend-microvm/openapi.yaml, for tests and development. It is a
 * stand-in, not an orchestrator: each "guest" is the real cordon agent in a
 * hardened container on the local engine, reached through a Firecracker-style
 * vsock socket (or a client-certificate TLS relay). It can enforce only a
 * deny-all egress policy (the container has no network), so it refuses every
 * other policy with `control-refused`.
 */
export async function startOrchestratorStandin(
  options: OrchestratorStandinOptions,
): Promise<OrchestratorStandin> {
  const docker = options.docker ?? new Dockerode()
  const image = options.image ?? DEFAULT_GUEST_IMAGE
  await docker.ping().catch((error: unknown) => {
    throw new Error(
      `the stand-in needs a Docker Engine (run tooling/engine/setup.sh): ${(error as Error).message}`,
      { cause: error },
    )
  })
  for (const ref of new Set([image, ...Object.values(options.templates ?? {})])) {
    await docker
      .getImage(ref)
      .inspect()
      .catch((error: unknown) => {
        throw new Error(
          `guest image ${ref} is missing (tooling/engine/setup.sh builds cordon-test/node)`,
          { cause: error },
        )
      })
  }
  const programPath = options.agentProgramPath ?? agentProgramPath()
  const standinId = `standin-${randomBytes(6).toString('hex')}`
  const stateDir = await mkdtemp(join(tmpdir(), 'cordon-standin-'))
  const snapshotDir = join(stateDir, 'snapshots')
  await mkdir(snapshotDir, { mode: 0o700 })
  const records = new Map<string, GuestRecord>()
  const snapshots = new Map<string, StoredSnapshot>()
  const expectedToken = Buffer.from(`Bearer ${options.token}`)

  const removeGuest = (id: string, record: GuestRecord): Promise<void> => {
    // From here on the guest is on its way out, even if this try fails (its relays are closed).
    record.deleteRequested = true
    record.removal ??= (async () => {
      if (record.lifetime) clearTimeout(record.lifetime)
      await record.ready.catch(() => {})
      await Promise.allSettled(record.relays.map((relay) => relay.close()))
      await record.guest?.remove()
      // Also when the container was never made: the run directory may still hold the secret file.
      await rm(join(stateDir, id), { recursive: true, force: true })
      records.delete(id)
    })().catch((error: unknown) => {
      // A removal the engine failed (a busy engine, a container mid-change) is tried again by the next DELETE.
      record.removal = undefined
      throw error
    })
    return record.removal
  }

  // The orchestrator enforces the lifetime too, so a host that died cannot leak the guest forever.
  const armLifetime = (id: string, record: GuestRecord, ms: number): void => {
    record.lifetimeEndsAt = Date.now() + ms
    record.lifetime = setTimeout(() => void removeGuest(id, record).catch(() => {}), ms)
    record.lifetime.unref()
  }

  const createGuest = async (
    request: ValidCreateRequest,
  ): Promise<{ record: GuestRecord; body: Record<string, unknown> }> => {
    const fromSnapshot =
      request.agentSnapshot === undefined
        ? undefined
        : snapshots.get(snapshotKey(request.agentSnapshot))
    if (request.agentSnapshot !== undefined && !fromSnapshot)
      throw new HttpError(
        404,
        'not-found',
        `no snapshot ${snapshotKey(request.agentSnapshot)} (this stand-in resumes only snapshots it captured)`,
      )
    if (
      fromSnapshot &&
      request.template !== undefined &&
      request.template !== fromSnapshot.template
    )
      throw new HttpError(
        409,
        'conflict',
        `snapshot ${fromSnapshot.key} is layered on template ${fromSnapshot.template ?? '(default)'}, not ${request.template}`,
      )
    const template = fromSnapshot ? fromSnapshot.template : request.template
    const guestImage = template === undefined ? image : options.templates?.[template]
    if (!guestImage) throw new HttpError(400, 'invalid-request', `unknown template "${template}"`)
    if (request.egressAllowlist === undefined || request.egressAllowlist.length > 0) {
      throw new HttpError(422, 'control-refused', 'egress policy refused', {
        control: 'egress',
        reason:
          request.egressAllowlist === undefined
            ? 'this stand-in can only cut the guest off the network (deny-all); allow-all needs a real orchestrator'
            : 'this stand-in can only cut the guest off the network (deny-all); an allowlist needs a real orchestrator',
      })
    }
    if (records.has(request.sandboxId))
      throw new HttpError(409, 'conflict', `sandbox ${request.sandboxId} already exists`)
    const hostDir = join(stateDir, request.sandboxId)
    let resolveReady!: () => void
    let rejectReady!: (error: unknown) => void
    const record: GuestRecord = {
      request,
      template,
      image: guestImage,
      ready: new Promise<void>((resolve, reject) => {
        resolveReady = resolve
        rejectReady = reject
      }),
      createdAt: Date.now(),
      relays: [],
      paused: false,
      operations: Promise.resolve(),
      deleteRequested: false,
    }
    record.ready.catch(() => {})
    records.set(request.sandboxId, record)
    try {
      record.guest = await startGuest(docker, {
        sandboxId: request.sandboxId,
        image: guestImage,
        memoryLimitMb: request.memoryLimitMb,
        maxProcesses: request.maxProcesses,
        agentSecret: request.agentSecret,
        labels: {
          ...options.labels,
          ...withoutLifetime(request.labels),
          'cordon.managed': '1',
          'cordon.standin': standinId,
          'cordon.sandbox': request.sandboxId,
        },
        hostDir,
        agentProgramPath: programPath,
        tmpSizeMb: options.tmpSizeMb ?? 64,
        outputsSizeMb: options.outputsSizeMb ?? 1024,
        cpus: options.cpus ?? 1,
        // The agent ended the guest (its host let go, its lifetime ran out): deleted as a DELETE would.
        onExit: () => void removeGuest(request.sandboxId, record).catch(() => {}),
      })
      // Before anyone can reach the agent: the client learns the endpoint from the answer.
      if (fromSnapshot) await restoreGuestFilesystem(record.guest, fromSnapshot.archivePath)
      let agent: Record<string, unknown>
      if (options.agentRelay) {
        const relay = await startMtlsRelay({
          host: options.host ?? '127.0.0.1',
          credentials: options.agentRelay,
          agentSocketPath: record.guest.agentSocketPath,
        })
        record.relays.push(relay)
        agent = {
          kind: 'tls',
          host: options.host ?? '127.0.0.1',
          port: relay.port,
          servername: 'localhost',
        }
      } else {
        const udsPath = join(hostDir, 'v.sock')
        record.relays.push(
          await startVsockRelay({
            udsPath,
            agentPort: request.agentVsockPort,
            agentSocketPath: record.guest.agentSocketPath,
          }),
        )
        agent = { kind: 'vsock', udsPath, port: request.agentVsockPort }
      }
      if (request.timeoutMs !== undefined)
        armLifetime(request.sandboxId, record, request.timeoutMs + 5_000)
      record.answer = { rootDir: GUEST_OUTPUTS_DIR, agent }
      resolveReady()
      return { record, body: { sandboxId: request.sandboxId, rootDir: GUEST_OUTPUTS_DIR, agent } }
    } catch (error) {
      rejectReady(error)
      await removeGuest(request.sandboxId, record).catch(() => {})
      throw error
    }
  }

  /** The guest an operation applies to: 404 when there is none, 409 while it is made or removed. */
  const runningGuest = (id: string): { record: GuestRecord; guest: Guest } => {
    if (!SANDBOX_ID_PATTERN.test(id))
      throw new HttpError(
        400,
        'invalid-request',
        'sandboxId must look like sbx_ and 26 base-32 characters',
      )
    const record = records.get(id)
    if (!record) throw new HttpError(404, 'not-found', `no sandbox ${id}`)
    if (!record.guest || record.removal || record.deleteRequested)
      throw new HttpError(409, 'conflict', `sandbox ${id} is being created or deleted`)
    return { record, guest: record.guest }
  }

  const serially = <T>(record: GuestRecord, operation: () => Promise<T>): Promise<T> => {
    const run = record.operations.then(operation, operation)
    record.operations = run.catch(() => {})
    return run
  }

  const pauseGuest = (id: string): Promise<void> => {
    const { record, guest } = runningGuest(id)
    return serially(record, async () => {
      if (record.paused || record.removal) return
      await guest.pause()
      record.paused = true
      // Paused time does not count toward the lifetime.
      if (record.lifetime && record.lifetimeEndsAt !== undefined) {
        clearTimeout(record.lifetime)
        record.lifetime = undefined
        record.lifetimeLeftMs = Math.max(0, record.lifetimeEndsAt - Date.now())
      }
    })
  }

  const resumeGuest = (id: string): Promise<void> => {
    const { record, guest } = runningGuest(id)
    return serially(record, async () => {
      if (!record.paused || record.removal) return
      await guest.resume()
      record.paused = false
      if (record.lifetimeLeftMs !== undefined) {
        armLifetime(id, record, record.lifetimeLeftMs)
        record.lifetimeLeftMs = undefined
      }
    })
  }

  const snapshotGuest = async (id: string, body: unknown): Promise<StoredSnapshot> => {
    const { problems, request } = parseSnapshotRequest(body)
    const { record, guest } = runningGuest(id)
    if (!request) throw new HttpError(400, 'invalid-request', problems.join('; '))
    if (request.memory) {
      throw new HttpError(422, 'control-refused', 'memory snapshot refused', {
        control: 'snapshot.memory',
        reason:
          "this stand-in captures a guest's filesystem only: its guests are runc containers, and capturing their memory needs CRIU, which it does not drive",
      })
    }
    const key = snapshotKey(request.agentSnapshot)
    return serially(record, async () => {
      if (snapshots.has(key)) throw new HttpError(409, 'conflict', `snapshot ${key} already exists`)
      if (record.paused) {
        throw new HttpError(
          409,
          'conflict',
          `sandbox ${id} is paused: this stand-in captures a filesystem by running tar in the guest, which a frozen guest cannot; resume it first`,
        )
      }
      const archivePath = join(snapshotDir, `${randomBytes(12).toString('hex')}.tar`)
      const sizeBytes = await captureGuestFilesystem(guest, archivePath)
      if (snapshots.has(key)) {
        await rm(archivePath, { force: true })
        throw new HttpError(409, 'conflict', `snapshot ${key} already exists`)
      }
      const stored: StoredSnapshot = {
        key,
        agentSnapshot: request.agentSnapshot,
        sourceSandboxId: id,
        ...(record.template === undefined ? {} : { template: record.template }),
        image: record.image,
        archivePath,
        memory: false,
        sizeBytes,
        createdAt: new Date().toISOString(),
        labels: { ...request.labels, 'cordon.standin': standinId },
      }
      snapshots.set(key, stored)
      return stored
    })
  }

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    let callerGone = false
    res.on('close', () => {
      if (!res.writableFinished) callerGone = true
    })
    const authorization = Buffer.from(req.headers.authorization ?? '')
    if (
      authorization.byteLength !== expectedToken.byteLength ||
      !timingSafeEqual(authorization, expectedToken)
    ) {
      throw new HttpError(401, 'unauthorized', 'a valid bearer token is required')
    }
    const url = new URL(req.url ?? '/', 'http://standin')
    if (url.pathname === '/v1/snapshots' || url.pathname.startsWith('/v1/snapshots/')) {
      await handleSnapshots(req, res, url)
      return
    }
    const match = /^\/v1\/sandboxes(?:\/([^/]+)(?:\/(pause|resume|snapshots))?)?$/.exec(
      url.pathname,
    )
    if (!match) throw new HttpError(404, 'not-found', `no route ${req.method} ${url.pathname}`)
    const id = match[1] === undefined ? undefined : decodeURIComponent(match[1])
    const operation = match[2]
    if (operation !== undefined && id !== undefined) {
      if (req.method !== 'POST')
        throw new HttpError(405, 'invalid-request', `${req.method} is not allowed here`)
      if (operation === 'snapshots') {
        send(res, 201, snapshotView(await snapshotGuest(id, await readJson(req))))
        return
      }
      await (operation === 'pause' ? pauseGuest(id) : resumeGuest(id))
      send(res, 200, { sandboxId: id, state: operation === 'pause' ? 'paused' : 'running' })
      return
    }

    if (req.method === 'POST' && id === undefined) {
      const { problems, request } = parseCreateRequest(await readJson(req))
      if (!request) throw new HttpError(400, 'invalid-request', problems.join('; '))
      const { record, body } = await createGuest(request)
      if (record.deleteRequested || callerGone) {
        // The caller deleted it, or went away, while it was being made: nobody will ever use it.
        await removeGuest(request.sandboxId, record)
        throw new HttpError(
          409,
          'conflict',
          `sandbox ${request.sandboxId} was deleted while it was being created`,
        )
      }
      send(res, 201, body)
      return
    }
    if (req.method === 'GET' && id === undefined) {
      const wanted = labelFilter(url)
      const listed = [...records.entries()].filter(([, record]) =>
        wanted.every(([key, value]) => record.request.labels[key] === value),
      )
      send(res, 200, { sandboxes: listed.map(([guestId, record]) => describe(guestId, record)) })
      return
    }
    if (id === undefined)
      throw new HttpError(405, 'invalid-request', `${req.method} is not allowed here`)
    const record = records.get(id)
    if (req.method === 'DELETE') {
      if (!record) throw new HttpError(404, 'not-found', `no sandbox ${id}`)
      record.deleteRequested = true
      await removeGuest(id, record)
      res.writeHead(204).end()
      return
    }
    if (req.method === 'GET') {
      if (!record) throw new HttpError(404, 'not-found', `no sandbox ${id}`)
      send(res, 200, describe(id, record))
      return
    }
    throw new HttpError(405, 'invalid-request', `${req.method} is not allowed here`)
  }

  const handleSnapshots = async (
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<void> => {
    if (url.pathname === '/v1/snapshots') {
      if (req.method !== 'GET')
        throw new HttpError(405, 'invalid-request', `${req.method} is not allowed here`)
      const wanted = labelFilter(url)
      const listed = [...snapshots.values()].filter((snapshot) =>
        wanted.every(([key, value]) => snapshot.labels[key] === value),
      )
      send(res, 200, { snapshots: listed.map(snapshotView) })
      return
    }
    const parts = url.pathname.slice('/v1/snapshots/'.length).split('/')
    if (parts.length !== 3 || parts.some((part) => part.length === 0))
      throw new HttpError(404, 'not-found', `no route ${req.method} ${url.pathname}`)
    const [orgId, agentId, version] = parts.map((part) => decodeURIComponent(part)) as [
      string,
      string,
      string,
    ]
    const key = snapshotKey({ orgId, agentId, version })
    const stored = snapshots.get(key)
    if (req.method === 'GET') {
      if (!stored) throw new HttpError(404, 'not-found', `no snapshot ${key}`)
      send(res, 200, snapshotView(stored))
      return
    }
    if (req.method === 'DELETE') {
      if (!stored) throw new HttpError(404, 'not-found', `no snapshot ${key}`)
      snapshots.delete(key)
      await rm(stored.archivePath, { force: true })
      res.writeHead(204).end()
      return
    }
    throw new HttpError(405, 'invalid-request', `${req.method} is not allowed here`)
  }

  const listener = (req: IncomingMessage, res: ServerResponse): void => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent || res.destroyed) return
      if (error instanceof HttpError) {
        send(res, error.status, {
          error: { code: error.code, message: error.message, ...error.extra },
        })
      } else {
        send(res, 503, {
          error: {
            code: 'unavailable',
            message: `could not start the guest: ${(error as Error)?.message ?? error}`,
          },
        })
      }
    })
  }
  const server: Server = options.tls
    ? createHttpsServer(
        {
          cert: options.tls.cert,
          key: options.tls.key,
          ...(options.tls.ca
            ? { ca: options.tls.ca, requestCert: true, rejectUnauthorized: true }
            : {}),
        },
        listener,
      )
    : createHttpServer(listener)
  const host = options.host ?? '127.0.0.1'
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0

  return {
    url: `${options.tls ? 'https' : 'http'}://${host}:${port}`,
    id: standinId,
    guests: () => [...records.keys()],
    snapshots: () => [...snapshots.keys()],
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      await Promise.allSettled(
        [...records.entries()].map(([id, record]) => removeGuest(id, record)),
      )
      await removeLabelledContainers(docker, standinId)
      await rm(stateDir, { recursive: true, force: true })
    },
  }
}

/** Removes every container carrying `cordon.standin=<id>`, including any a crash left behind. */
export async function removeLabelledContainers(
  docker: Dockerode,
  standinId: string,
): Promise<number> {
  const leftovers = await docker.listContainers({
    all: true,
    filters: { label: [`cordon.standin=${standinId}`] },
  })
  await Promise.allSettled(
    leftovers.map((info) => docker.getContainer(info.Id).remove({ force: true, v: true })),
  )
  return leftovers.length
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res
    .writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    })
    .end(text)
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.byteLength
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'invalid-request', 'request body too large')
    chunks.push(chunk)
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'))
  } catch {
    throw new HttpError(400, 'invalid-request', 'the body is not valid JSON')
  }
}

/** A guest as `GET /v1/sandboxes/{id}` and the list describe it (openapi.yaml's SandboxDescription). */
function describe(id: string, record: GuestRecord): Record<string, unknown> {
  const running = record.guest !== undefined && record.answer !== undefined
  return {
    sandboxId: id,
    state: !running ? 'creating' : record.paused ? 'paused' : 'running',
    labels: record.request.labels,
    template: record.request.template ?? null,
    agentSnapshot: record.request.agentSnapshot ?? null,
    createdAt: new Date(record.createdAt).toISOString(),
    ...(record.lifetimeEndsAt !== undefined && record.lifetime !== undefined
      ? { expiresAt: new Date(record.lifetimeEndsAt).toISOString() }
      : {}),
    ...(running ? record.answer : {}),
  }
}

/** The `label=key=value` query parameters of a list, every one of which must match. */
function labelFilter(url: URL): Array<readonly [string, string]> {
  return url.searchParams.getAll('label').map((pair) => {
    const equals = pair.indexOf('=')
    if (equals < 1) throw new HttpError(400, 'invalid-request', `label ${pair} is not key=value`)
    return [pair.slice(0, equals), pair.slice(equals + 1)] as const
  })
}

/**
 * A guest's labels as its container carries them, without `cordon.detached`
 * and `cordon.expires`. The guest's lifetime is this orchestrator's to
 * enforce (its record keeps every label for GET); on the container, a Docker
 * provider sharing the engine (another test's background sweep, `cordon gc`)
 * would read them as its own and remove the container of a detached guest
 * past its end time, which a paused guest may be, underneath this
 * orchestrator.
 */
function withoutLifetime(labels: Readonly<Record<string, string>>): Record<string, string> {
  const { 'cordon.detached': _detached, 'cordon.expires': _expires, ...kept } = labels
  // Its creator's owner labels too: whether a guest outlives its creator is
  // the orchestrator's and the microVM backend's to judge (its
  // gone-owner-sweep.ts), not a Docker gc's that finds the guest's container.
  return Object.fromEntries(
    Object.entries(kept).filter(([key]) => !key.startsWith('cordon.owner.')),
  )
}
