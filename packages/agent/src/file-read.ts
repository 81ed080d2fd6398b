import { constants } from 'node:fs'
import { open } from 'node:fs/promises'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import { DATA_CHUNK_BYTES } from './protocol/frame-codec.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type { ReadFileRequest } from './protocol/messages.js'

/**
 * Streams a regular file to the client in data frames. Memory stays at one
 * chunk: the next read waits until the socket has taken the previous one.
 */
export async function serveReadFile(
  connection: FramedConnection,
  request: ReadFileRequest,
  jail: PathJail,
): Promise<void> {
  const real = await jail.resolveForRead(request.path)
  let handle: Awaited<ReturnType<typeof open>>
  try {
    handle = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP')
      throw new AgentOperationError('not-found', `no such file: ${request.path}`)
    throw error
  }
  try {
    await jail.checkOpened(handle.fd, request.path, 'read')
    const stat = await handle.stat()
    if (!stat.isFile())
      throw new AgentOperationError('not-found', `not a regular file: ${request.path}`)
    await connection.send({ type: 'file-info', size: stat.size, mode: stat.mode & 0o7777 })
    for (;;) {
      // A fresh buffer per chunk: the socket may still hold the previous one.
      const buffer = Buffer.allocUnsafe(DATA_CHUNK_BYTES)
      const { bytesRead } = await handle.read(buffer, 0, buffer.byteLength, null)
      if (bytesRead === 0) break
      await connection.sendData('file', buffer.subarray(0, bytesRead))
    }
    await connection.send({ type: 'end' })
  } finally {
    await handle.close()
  }
}
