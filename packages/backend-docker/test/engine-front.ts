import { mkdtempSync, rmSync } from 'node:fs'
import { createConnection, createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** What the front does to the engine's calls; a call is matched by a part of its request line. */
export interface EngineFrontRules {
  /**
   * The first call matching `request` reaches the engine `ms` late, and does
   * even when the client has given up on it by then: a busy engine slow to
   * take a call the client cut off, made certain.
   */
  readonly hold?: { readonly request: string; readonly ms: number }
  /** The first call matching this (one without a body: a GET) is answered 500 by the front; the engine never sees it. */
  readonly refuse?: string
}

export interface EngineFront {
  readonly socketPath: string
  /** Resolves when the held call arrives. */
  readonly held: Promise<void>
  /** Resolves when the engine's answer to the held call comes back. */
  readonly answered: Promise<void>
  /** Resolves when the refused call was refused. */
  readonly refused: Promise<void>
  /** The request lines (`GET /path HTTP/1.1`) of the calls that passed the front, in order. */
  readonly passed: readonly string[]
  close(): Promise<void>
}

const REQUEST_LINE = /^(?:GET|HEAD|POST|PUT|DELETE) \S+ HTTP\/1\.1\r\n/

/**
 * A Unix socket in front of the engine's that passes every byte through as
 * it is, but for the calls its rules name.
 */
export async function engineFront(rules: EngineFrontRules): Promise<EngineFront> {
  const directory = mkdtempSync(join(tmpdir(), 'cordon-front-'))
  const socketPath = join(directory, 'engine.sock')
  const signal = () => {
    let mark = (): void => {}
    const promise = new Promise<void>((resolve) => {
      mark = resolve
    })
    return { promise, mark }
  }
  const held = signal()
  const answered = signal()
  const refused = signal()
  let holdUsed = false
  let refuseUsed = false
  const passed: string[] = []
  const connections = new Set<Socket>()
  const server = createServer({ allowHalfOpen: true }, (client) => {
    const engine = createConnection('/var/run/docker.sock')
    connections.add(client).add(engine)
    let holding: Buffer[] | undefined
    let holdingThisConnection = false
    client.on('data', (chunk: Buffer) => {
      if (holding) return void holding.push(chunk)
      const requestLine = REQUEST_LINE.exec(chunk.toString('latin1'))?.[0].trimEnd()
      if (requestLine && rules.refuse && !refuseUsed && requestLine.includes(rules.refuse)) {
        refuseUsed = true
        const body = JSON.stringify({ message: 'refused by the test front' })
        client.write(
          `HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
        )
        refused.mark()
        return
      }
      if (requestLine) passed.push(requestLine)
      if (requestLine && rules.hold && !holdUsed && requestLine.includes(rules.hold.request)) {
        holdUsed = true
        holding = [chunk]
        holdingThisConnection = true
        held.mark()
        setTimeout(() => {
          for (const piece of holding ?? []) engine.write(piece)
          holding = undefined
          if (client.readableEnded) engine.end()
        }, rules.hold.ms)
        return
      }
      engine.write(chunk)
    })
    client.on('end', () => {
      if (!holding) engine.end()
    })
    engine.on('data', (chunk: Buffer) => {
      if (holdingThisConnection) answered.mark()
      if (!client.destroyed) client.write(chunk)
    })
    engine.on('end', () => client.end())
    // A client that cut its call off closes here; a held call still goes on.
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
    held: held.promise,
    answered: answered.promise,
    refused: refused.promise,
    passed,
    async close() {
      for (const socket of connections) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      rmSync(directory, { recursive: true, force: true })
    },
  }
}
