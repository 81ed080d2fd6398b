import { randomBytes } from 'node:crypto'
import { constants } from 'node:fs'
import { mkdir, open, rename, stat, unlink } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import { parseClientMessage, type WriteFileRequest } from './protocol/messages.js'

/**
 * Receives a file in data frames and puts it in place atomically: bytes go to
 * a temporary file beside the target, which replaces the target only after
 * the end frame arrived and (with a declared size) the byte count matched. A
 * failed or abandoned upload leaves the old file untouched.
 */
export async function serveWriteFile(
  connection: FramedConnection,
  request: WriteFileRequest,
  jail: PathJail,
): Promise<void> {
  const real = await jail.resolveForWrite(request.path)
  const directory = dirname(real)
  await mkdir(directory, { recursive: true, mode: 0o755 })
  // The directories just made must still lead inside the roots.
  await jail.resolveForWrite(directory)
  const existing = await stat(real).catch(() => undefined)
  if (existing?.isDirectory())
    throw new AgentOperationError('bad-request', `${request.path} is a directory`)
  const mode = request.mode ?? (existing ? existing.mode & 0o7777 : 0o644)

  const temporary = join(
    directory,
    `.${basename(real)}.${randomBytes(6).toString('hex')}.cordon-upload`,
  )
  const handle = await open(
    temporary,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  )
  let placed = false
  try {
    await jail.checkOpened(handle.fd, request.path, 'write')
    await connection.send({ type: 'write-ready' })
    let received = 0
    for (;;) {
      const frame = await connection.read()
      if (!frame)
        throw new AgentOperationError(
          'size-mismatch',
          `the upload ended after ${received} bytes without an end frame`,
        )
      if (frame.kind === 'data') {
        if (frame.channel !== 'file')
          throw new AgentOperationError('bad-request', `unexpected data on ${frame.channel}`)
        received += frame.data.byteLength
        if (request.size !== undefined && received > request.size) {
          throw new AgentOperationError(
            'size-mismatch',
            `received more than the declared ${request.size} bytes`,
          )
        }
        await handle.write(frame.data)
        continue
      }
      const message = parseClientMessage(frame.message)
      if (message.type !== 'end')
        throw new AgentOperationError(
          'bad-request',
          `unexpected "${message.type}" during an upload`,
        )
      if (request.size !== undefined && received !== request.size) {
        throw new AgentOperationError(
          'size-mismatch',
          `received ${received} bytes, declared ${request.size}`,
        )
      }
      await handle.chmod(mode)
      await handle.close()
      await rename(temporary, real)
      placed = true
      await connection.send({ type: 'write-done', bytes: received })
      return
    }
  } finally {
    if (!placed) {
      await handle.close().catch(() => {})
      await unlink(temporary).catch(() => {})
    }
  }
}
