import { randomBytes } from 'node:crypto'
import { closeSync, constants, openSync, unlinkSync } from 'node:fs'
import { type FileHandle, open } from 'node:fs/promises'
import { STAGED_AHEAD, STAGED_PIECE_BYTES, type UploadStage } from '@cordon/agent/protocol'

/**
 * The host's side of staged upload pieces (the agent's staged-pieces.ts says
 * why they are faster under gVisor): pieces written as files into the
 * directory of a gVisor sandbox's host-backed socket, an engine volume that
 * is a tmpfs on the host, root's, mode 0700, which only this host and the
 * sandbox's agent reach.
 *
 * Each piece is a new file, created exclusively and without following a
 * link (`O_CREAT | O_EXCL | O_NOFOLLOW`), under a random name, through a
 * descriptor of the directory this stage opened itself: whatever stands in
 * the directory, the host writes only into a file it has just made there.
 * The directory's tmpfs is {@link STAGE_ROOM_BYTES} large (the host's
 * memory, held only while pieces wait); a piece that does not fit, or any
 * other failure to stage, is removed and its bytes go over the connection
 * instead.
 */

/** Uploads that can each keep their pieces in flight at once; a third sends bytes. */
const UPLOADS_STAGED_AT_ONCE = 2

/**
 * The stage's room: what {@link hostSocketMount}'s tmpfs gets beyond the
 * socket's, the pieces two uploads keep waiting at most.
 */
export const STAGE_ROOM_BYTES = UPLOADS_STAGED_AT_ONCE * STAGED_AHEAD * STAGED_PIECE_BYTES

const CREATE_FLAGS =
  constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW

export class HostUploadStage implements UploadStage {
  /** Pieces being written: the directory's descriptor stays open until the last is done. */
  private writing = 0
  private closed = false

  private constructor(private readonly dirFd: number) {}

  /**
   * A stage in the directory `directoryFd` refers to, through a descriptor of
   * its own (so that closing the caller's does not pull it away).
   */
  static of(directoryFd: number): HostUploadStage {
    // The descriptor's own link in /proc: the directory it holds, not a path
    // looked up again (no O_NOFOLLOW, which would refuse that link itself).
    return new HostUploadStage(
      openSync(`/proc/self/fd/${directoryFd}`, constants.O_RDONLY | constants.O_DIRECTORY),
    )
  }

  async put(pieces: readonly Uint8Array[], bytes: number): Promise<string | undefined> {
    if (this.closed) return undefined
    const name = `${randomBytes(16).toString('hex')}.upload`
    this.writing++
    let file: FileHandle | undefined
    try {
      file = await open(this.path(name), CREATE_FLAGS, 0o600)
      const { bytesWritten } = await file.writev(pieces as Uint8Array[])
      if (bytesWritten !== bytes) throw new Error('short write: the stage is full')
      return name
    } catch {
      // Full (ENOSPC), gone, or a name taken: the bytes take the connection.
      if (file !== undefined) this.discard(name)
      return undefined
    } finally {
      await file?.close().catch(() => {})
      this.writing--
      if (this.closed && this.writing === 0) closeSync(this.dirFd)
    }
  }

  discard(name: string): void {
    if (this.closed && this.writing === 0) return
    try {
      unlinkSync(this.path(name))
    } catch {
      // Taken by the agent already, or never made.
    }
  }

  /** No more pieces; the directory's descriptor is closed once none is being written. */
  close(): void {
    if (this.closed) return
    this.closed = true
    if (this.writing === 0) closeSync(this.dirFd)
  }

  private path(name: string): string {
    return `/proc/self/fd/${this.dirFd}/${name}`
  }
}
