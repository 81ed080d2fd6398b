import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  FramedConnection,
  newAgentSecret,
  PROTOCOL_VERSION,
  parseClientMessage,
} from '@cordon/agent/protocol'
import { SandboxTransportError } from '@cordon/core'
import { startMtlsRelay, startVsockRelay } from '@cordon/orchestrator-standin'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { VsockAgentTransport } from '../src/index.js'
import { makeTestPki, type TestPki } from './host-agent.js'

/**
 * Issue 26, item 6, on each of the microVM tier's transports: a guest
 * endpoint that answers without holding the sandbox's secret (an impostor
 * on the vsock socket, or behind the mTLS relay) is refused by the host,
 * which sends it nothing after its own proof.
 */

const fast = { maxConnectAttempts: 2, retryDelayMs: 20, connectTimeoutMs: 2_000 }

let dir: string
let impostor: Server
let impostorPath: string
/** Everything sent to the impostor after the host's proof, on any connection. */
const afterProof: unknown[] = []
let proofs = 0

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cordon-microvm-impostor-'))
  impostorPath = join(dir, 'impostor.sock')
  impostor = createServer(async (socket) => {
    const connection = new FramedConnection(socket)
    try {
      await connection.send({
        type: 'hello',
        protocol: PROTOCOL_VERSION,
        nonce: 'ab'.repeat(32),
        agentVersion: 'impostor',
      })
      const frame = await connection.read()
      if (frame?.kind !== 'message' || parseClientMessage(frame.message).type !== 'auth') return
      proofs++
      // It cannot compute the agent's proof: it says so with whatever it has.
      await connection.send({ type: 'auth-ok', proof: '00'.repeat(32) })
      for (;;) {
        const next = await connection.read()
        if (!next) return
        afterProof.push(next.kind === 'message' ? next.message : next.kind)
      }
    } catch {
      // The host hung up.
    }
  })
  impostor.listen(impostorPath)
  await once(impostor, 'listening')
})

afterAll(async () => {
  impostor?.close()
  await rm(dir, { recursive: true, force: true })
})

async function expectRefused(transport: VsockAgentTransport): Promise<void> {
  const before = proofs
  const refused = await transport.client.health().catch((error: unknown) => error)
  expect(SandboxTransportError.isInstance(refused), String(refused)).toBe(true)
  expect((refused as Error).message).toContain('did not prove it holds the sandbox secret')
  expect(proofs).toBeGreaterThan(before)
  expect(afterProof).toEqual([])
}

describe('an impostor on a microVM transport is refused by the host', () => {
  it('on a plain unix socket', async () => {
    await expectRefused(
      new VsockAgentTransport(
        { kind: 'unix', path: impostorPath },
        { secret: newAgentSecret(), ...fast },
      ),
    )
  })

  it("behind Firecracker's vsock socket", async () => {
    const vsockPath = join(dir, 'v.sock')
    const relay = await startVsockRelay({
      udsPath: vsockPath,
      agentPort: 1024,
      agentSocketPath: impostorPath,
    })
    try {
      await expectRefused(
        new VsockAgentTransport(
          { kind: 'vsock', udsPath: vsockPath },
          { secret: newAgentSecret(), ...fast },
        ),
      )
    } finally {
      await relay.close()
    }
  })

  describe('behind an mTLS relay', () => {
    let pki: TestPki & { cleanup(): Promise<void> }
    beforeAll(async () => {
      pki = await makeTestPki()
    })
    afterAll(async () => {
      await pki?.cleanup()
    })

    it('the relay is trusted, the guest behind it is not', async () => {
      const relay = await startMtlsRelay({
        host: '127.0.0.1',
        credentials: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
        agentSocketPath: impostorPath,
      })
      try {
        await expectRefused(
          new VsockAgentTransport(
            { kind: 'tls', host: '127.0.0.1', port: relay.port, servername: 'localhost' },
            {
              secret: newAgentSecret(),
              ...fast,
              tls: { cert: pki.clientCert, key: pki.clientKey, ca: pki.ca },
            },
          ),
        )
      } finally {
        await relay.close()
      }
    })
  })
})
