import { closeSync, constants, fstatSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { AgentOperationError } from './operation-error.js'
import { STAGED_NAME } from './protocol/messages.js'

/**
 * Pieces of an upload that the host hands over as files, not as bytes on
 * the connection.
 *
 * Under gVisor on the ptrace platform every system call is a round trip
 * through its kernel, and bytes that come over a socket arrive a few
 * hundred KiB a read (about 500 reads for 100 MiB, each a trip, and each a
 * copy Node then makes into its own buffers). A gVisor sandbox's agent has
 * a directory the host also sees: the engine volume of its host-backed
 * socket, a tmpfs on the host, root's, mode 0700 (backend-docker's
 * direct-socket.ts), which the sandbox's user cannot enter. The host writes
 * a piece of the upload there as a file, and the agent reads it in reads
 * of {@link PIECE_READ_BYTES} (gVisor reads such a file straight from the
 * host's descriptor) and writes it into the upload: measured in a bare
 * gVisor container, 100 MiB read from such a mount and written into a
 * tmpfs took 115-150 ms, where the same bytes over the socket took about
 * 300 ms.
 *
 * What keeps it safe: the name is checked ({@link STAGED_NAME}: no
 * directory part); the file is opened without following a link, must be a
 * regular file of exactly the announced size, and is read only by the
 * agent, into the upload the sandbox's user may write anyway. The piece is
 * removed from the stage whatever happens, so a failed upload leaves
 * nothing in the host's memory. The stage is for the agent alone: the
 * sandbox's user cannot reach it, so it cannot feed the agent a piece.
 */

/** The size of one read of a staged piece (and of the buffer an upload holds for them). */
export const PIECE_READ_BYTES = 4 * 1024 * 1024

/** Opened without following a link, and without waiting should something not a file stand there. */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK

/**
 * Writes the staged piece `name` (announced as `bytes` long) to `fd` and
 * removes it from `stage`. Throws {@link AgentOperationError} for a name,
 * file or size that is not what was announced; the piece is removed then
 * too.
 */
export function takeStagedPiece(
  stage: string,
  name: string,
  bytes: number,
  fd: number,
  buffer: Buffer,
): void {
  if (!STAGED_NAME.test(name))
    throw new AgentOperationError('bad-request', `"${name}" is not a staged piece's name`)
  const path = join(stage, name)
  let piece: number | undefined
  try {
    piece = openSync(path, OPEN_FLAGS)
    const stats = fstatSync(piece)
    if (!stats.isFile() || stats.size !== bytes)
      throw new AgentOperationError(
        'size-mismatch',
        `the staged piece holds ${stats.isFile() ? `${stats.size} bytes` : 'no regular file'}, announced ${bytes}`,
      )
    for (let done = 0; done < bytes; ) {
      const read = readSync(piece, buffer, 0, Math.min(buffer.byteLength, bytes - done), done)
      if (read === 0)
        throw new AgentOperationError('size-mismatch', `the staged piece ended after ${done} bytes`)
      for (let offset = 0; offset < read; ) offset += writeSync(fd, buffer, offset, read - offset)
      done += read
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT')
      throw new AgentOperationError('bad-request', `no staged piece "${name}"`)
    throw error
  } finally {
    if (piece !== undefined) closeSync(piece)
    try {
      unlinkSync(path)
    } catch {
      // Not there (never was, or the host took it back).
    }
  }
}
