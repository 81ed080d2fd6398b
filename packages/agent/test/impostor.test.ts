import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxReadinessError, SandboxTransportError } from '@cordon/core'
import fc from 'fast-check'
import { afterEach, describe, expect, it } from 'vitest'
import {
  AgentImpostorError,
  authenticateToAgent,
  computeAgentProof,
  computeAuthProof,
  FramedConnection,
  PROTOCOL_VERSION,
  parseClientMessage,
  requestHealth,
  verifyAgentProof,
} from '../src/protocol/index.js'
import { AgentClient, dialTcp, waitForAgent } from '../src/sandbox/index.js'
import { startAgentProcess } from './agent-harness.js'

/**
 * Issue 26, item 6: the host proves the secret to the agent, and the agent
 * proves it back, on every connection. Whatever answers on a channel without
 * the secret (a wrong container after a race, an impostor on a network path)
 * gets the host's proof, which is of no use against another nonce, and
 * nothing else: no request, no file, no command.
 */

/** What an impostor saw on one connection. */
interface Seen {
  auth?: { proof: string; nonce: string }
  /** Anything the host sent after its proof: must stay empty. */
  readonly afterAuth: unknown[]
}

/**
 * A peer that speaks the protocol but does not hold the secret: it answers
 * the host's proof with `answer` (a forged proof, by default one made with
 * the wrong secret) and records everything sent to it.
 */
function impostor(
  answer: (auth: { proof: string; nonce: string }, ourNonce: string) => string | Promise<string>,
): { server: Server; seen: Seen[] } {
  const seen: Seen[] = []
  const server = createServer(async (socket: Socket) => {
    const connection = new FramedConnection(socket)
    const record: Seen = { afterAuth: [] }
    seen.push(record)
    const ourNonce = 'ab'.repeat(32)
    try {
      await connection.send({
        type: 'hello',
        protocol: PROTOCOL_VERSION,
        nonce: ourNonce,
        agentVersion: 'impostor',
      })
      const frame = await connection.read()
      if (frame?.kind !== 'message') return
      const auth = parseClientMessage(frame.message)
      if (auth.type !== 'auth') return
      record.auth = { proof: auth.proof, nonce: auth.nonce }
      await connection.send({ type: 'auth-ok', proof: await answer(record.auth, ourNonce) })
      for (;;) {
        const next = await connection.read()
        if (!next) return
        record.afterAuth.push(next.kind === 'message' ? next.message : next.kind)
      }
    } catch {
      // The host hung up: what this test wants.
    }
  })
  return { server, seen }
}

async function listenTcp(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return (server.address() as { port: number }).port
}

const servers: Server[] = []
afterEach(async () => {
  for (const server of servers.splice(0)) server.close()
})

describe('the agent proves the secret back', () => {
  it("an agent proof verifies only with the secret and both nonces, and is never a client's proof of any nonce", () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 16 }),
        fc.string({ minLength: 16 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        (secret, other, clientBytes, agentBytes) => {
          const client = Buffer.from(clientBytes).toString('hex')
          const agent = Buffer.from(agentBytes).toString('hex')
          const proof = computeAgentProof(secret, client, agent)
          expect(verifyAgentProof(secret, client, agent, proof)).toBe(true)
          if (other !== secret) expect(verifyAgentProof(other, client, agent, proof)).toBe(false)
          if (client !== agent) expect(verifyAgentProof(secret, agent, client, proof)).toBe(false)
          // What a client computes for any nonce is not an agent's proof (no reflection).
          expect(proof).not.toBe(computeAuthProof(secret, client))
          expect(proof).not.toBe(computeAuthProof(secret, agent))
        },
      ),
      { numRuns: 100 },
    )
  })

  it('the real agent answers the host with a proof the host checks', async () => {
    const agent = await startAgentProcess()
    try {
      const health = await requestHealth(await agent.connect())
      expect(health.type).toBe('health-ok')
    } finally {
      await agent.stop()
    }
  })
})

describe('a peer without the secret is refused by the host', () => {
  it('one that forges its proof gets no request', async () => {
    const { server, seen } = impostor(() =>
      computeAgentProof('a-wrong-secret-!!', 'cd'.repeat(32), 'ab'.repeat(32)),
    )
    servers.push(server)
    const port = await listenTcp(server)
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => resolve(s))
      s.once('error', reject)
    })
    const connection = new FramedConnection(socket)
    await expect(
      authenticateToAgent(connection, 'the-real-secret-0123456789'),
    ).rejects.toBeInstanceOf(AgentImpostorError)
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(seen).toHaveLength(1)
    expect(seen[0]!.afterAuth).toEqual([])
  })

  it("one that reflects the host's own nonce back as a challenge on a second connection still cannot answer", async () => {
    // It has the host compute HMAC(secret, host nonce) on a second connection
    // and offers that as the agent's proof on the first.
    const { server, seen } = impostor(async (auth) => {
      // The second connection's hello carries the first connection's client nonce.
      const mirror = createServer(async (socket) => {
        const connection = new FramedConnection(socket)
        await connection.send({
          type: 'hello',
          protocol: PROTOCOL_VERSION,
          nonce: auth.nonce,
          agentVersion: 'impostor',
        })
        const frame = await connection.read()
        if (frame?.kind === 'message') {
          const second = parseClientMessage(frame.message)
          if (second.type === 'auth') mirrored = second.proof
        }
        socket.destroy()
      })
      servers.push(mirror)
      const mirrorPort = await listenTcp(mirror)
      let mirrored = ''
      const other = new AgentClient({
        secret: SECRET,
        dial: dialTcp('127.0.0.1', mirrorPort),
        description: 'mirror',
      })
      await other.health().catch(() => {})
      return mirrored || '00'.repeat(32)
    })
    servers.push(server)
    const SECRET = 'the-real-secret-0123456789'
    const port = await listenTcp(server)
    const host = new AgentClient({
      secret: SECRET,
      dial: dialTcp('127.0.0.1', port),
      description: `tcp:127.0.0.1:${port}`,
    })
    const refused = await host.health().catch((error: unknown) => error)
    expect(SandboxTransportError.isInstance(refused), String(refused)).toBe(true)
    expect((refused as Error).message).toContain('did not prove it holds the sandbox secret')
    expect((refused as Error).cause).toBeInstanceOf(AgentImpostorError)
    expect(seen[0]!.afterAuth).toEqual([])
  })

  it('readiness fails at once with a typed error, instead of retrying an impostor until the deadline', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'cordon-impostor-'))
    const { server, seen } = impostor(() => 'ff'.repeat(32))
    servers.push(server)
    const path = join(dir, 'agent.sock')
    server.listen(path)
    await once(server, 'listening')
    try {
      const client = new AgentClient({
        secret: 'the-real-secret-0123456789',
        dial: () =>
          new Promise((resolve, reject) => {
            const socket = connect(path)
            socket.once('connect', () => resolve(socket))
            socket.once('error', reject)
          }),
        description: `unix:${path}`,
      })
      const started = Date.now()
      const refused = await waitForAgent(client, 'sbx_impostor', AbortSignal.timeout(10_000)).catch(
        (error: unknown) => error,
      )
      expect(SandboxReadinessError.isInstance(refused), String(refused)).toBe(true)
      expect(Date.now() - started).toBeLessThan(5_000)
      expect(seen.every((record) => record.afterAuth.length === 0)).toBe(true)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
