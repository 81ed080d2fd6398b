import type { Server } from 'node:net'

/** What `net.Server.listen()` calls in a process that is not a cluster worker. */
interface ListenInternals {
  _listen2?: (address: string, port: number, addressType: number, backlog: number) => void
  _pipeName?: string
}

/**
 * Listens on a unix socket path; resolves once listening.
 *
 * `server.listen()` loads `node:cluster` on every call, to ask whether this
 * process is a cluster worker (one would borrow its primary's socket), and
 * `node:cluster` loads `node:child_process`: about 2.5 ms on this kind of
 * machine, more in a container, on the path of every Docker sandbox's create.
 * The agent is never a cluster worker, so it calls what `listen()` calls in
 * a primary, the server's legacy alias `_listen2` (kept by Node for code that
 * wraps it); a Node without it gets `listen()`.
 */
export function listenOnPath(server: Server, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (error: Error): void => {
      server.off('listening', onListening)
      reject(error)
    }
    const onListening = (): void => {
      server.off('error', onError)
      resolve()
    }
    server.once('error', onError)
    server.once('listening', onListening)
    const internals = server as unknown as ListenInternals
    if (typeof internals._listen2 === 'function') {
      // As listen() does for a path: address() answers with it.
      internals._pipeName = path
      internals._listen2.call(server, path, -1, -1, 511)
    } else {
      server.listen(path)
    }
  })
}
