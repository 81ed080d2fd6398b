import { randomBytes } from 'node:crypto'
import {
  closeSync,
  constants,
  fchmodSync,
  mkdirSync,
  openSync,
  renameSync,
  statSync,
  unlinkSync,
  write,
} from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { promisify } from 'node:util'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import { parseClientMessage, type WriteFileRequest } from './protocol/messages.js'

const writeToDescriptor = promisify(write)

/**
 * Receives a file in data frames and puts it in place atomically: bytes go to
 * a temporary file beside the target, which replaces the target only after
 * the end frame arrived and (with a declared size) the byte count matched. A
 * failed or abandoned upload leaves the old file untouched. Directories, the
 * temporary file and the rename are made as the sandbox's user, so what is
 * written belongs to it and goes only where it may write.
 */
export async function serveWriteFile(
  connection: FramedConnection,
  request: WriteFileRequest,
  jail: PathJail,
): Promise<void> {
  const { fd, temporary, real, mode } = jail.actAs(() => {
    const real = jail.resolveForWrite(request.path)
    const directory = dirname(real)
    mkdirSync(directory, { recursive: true, mode: 0o755 })
    // The directories just made must still lead inside the roots.
    jail.resolveForWrite(directory)
    const existing = statSync(real, { throwIfNoEntry: false })
    if (existing?.isDirectory())
      throw new AgentOperationError('bad-request', `${request.path} is a directory`)
    const mode = request.mode ?? (existing ? existing.mode & 0o7777 : 0o644)
    const temporary = join(
      directory,
      `.${basename(real)}.${randomBytes(6).toString('hex')}.cordon-upload`,
    )
    const fd = openSync(
      temporary,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    )
    return { fd, temporary, real, mode }
  })
  let open = true
  let placed = false
  try {
    jail.checkOpened(fd, request.path, 'write')
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
        for (let offset = 0; offset < frame.data.byteLength; ) {
          const { bytesWritten } = await writeToDescriptor(
            fd,
            frame.data,
            offset,
            frame.data.byteLength - offset,
          )
          offset += bytesWritten
        }
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
      jail.actAs(() => {
        fchmodSync(fd, mode)
        closeSync(fd)
        open = false
        renameSync(temporary, real)
      })
      placed = true
      await connection.send({ type: 'write-done', bytes: received })
      return
    }
  } finally {
    if (open) closeSync(fd)
    if (!placed) {
      try {
        jail.actAs(() => unlinkSync(temporary))
      } catch {
        // Already gone.
      }
    }
  }
}
