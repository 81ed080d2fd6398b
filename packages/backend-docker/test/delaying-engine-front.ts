import { mkdtempSync, rmSync } from 'node:fs'
import { createConnection, createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * A Unix socket in front of the engine that passes every byte through as it
 * is, except that a request whose first line starts with `heldRequest` is
 * held `holdMs` before the engine sees it, and is sent on even when the
 * client has given up on it by then: a busy engine that is slow to take a
 * call the client cut off, made certain. `seen` resolves when the held
 * request arrives, `answered` when the engine's answer to it comes back.
 */
export async function delayingEngineFront(
  heldRequest: string,
  holdMs: number,
): Promise<{
  socketPath: string
  seen: Promise<void>
  answered: Promise<void>
  close(): Promise<void>
}> {
  const directory = mkdtempSync(join(tmpdir(), 'cordon-front-'))
  const socketPath = join(directory, 'engine.sock')
  let markSeen = (): void => {}
  let markAnswered = (): void => {}
  const seen = new Promise<void>((resolve) => {
    markSeen = resolve
  })
  const answered = new Promise<void>((resolve) => {
    markAnswered = resolve
  })
  const connections = new Set<Socket>()
  const server = createServer({ allowHalfOpen: true }, (client) => {
    const engine = createConnection('/var/run/docker.sock')
    connections.add(client).add(engine)
    let holding: Buffer[] | undefined
    let holdingThisConnection = false
    client.on('data', (chunk: Buffer) => {
      if (holding) return void holding.push(chunk)
      if (chunk.toString('latin1').includes(heldRequest)) {
        holding = [chunk]
        holdingThisConnection = true
        markSeen()
        setTimeout(() => {
          for (const held of holding ?? []) engine.write(held)
          holding = undefined
          if (client.readableEnded) engine.end()
        }, holdMs)
        return
      }
      engine.write(chunk)
    })
    client.on('end', () => {
      if (!holding) engine.end()
    })
    engine.on('data', (chunk: Buffer) => {
      if (holdingThisConnection) markAnswered()
      if (!client.destroyed) client.write(chunk)
    })
    engine.on('end', () => client.end())
    // A client that cut its call off closes here; the held request still goes on.
    client.on('error', () => {})
    engine.on('error', () => client.destroy())
    client.on('close', () => connections.delete(client))
    engine.on('close', () => {
      connections.delete(engine)
      client.destroy()
    })
  })
  await new Promise<void>((resolve) => server.listen(socketPath, resolve))
  return {
    socketPath,
    seen,
    answered,
    async close() {
      for (const socket of connections) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      rmSync(directory, { recursive: true, force: true })
    },
  }
}
