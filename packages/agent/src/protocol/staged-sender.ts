import type { FramedConnection } from './framed-connection.js'
import type { AgentMessage } from './messages.js'

/**
 * Where a host can hand an agent pieces of an upload as files rather than
 * as bytes on the connection: a directory both reach and the sandbox's user
 * does not (a gVisor sandbox's host-backed socket directory; the agent's
 * staged-pieces.ts says why it is faster there). Offered by a backend
 * through `AgentClientOptions.uploadStage`.
 */
export interface UploadStage {
  /**
   * Writes `pieces` (`bytes` in all) to a new file in the stage and returns
   * its name (32 lowercase hex digits and `.upload`: `STAGED_NAME`), or
   * undefined when the stage has no room now: the bytes then go over the
   * connection.
   */
  put(pieces: readonly Uint8Array[], bytes: number): Promise<string | undefined>
  /** Removes a piece the agent did not take (the upload ended first). Never throws. */
  discard(name: string): void
}

/** Bytes of a staged piece: read by the agent in one read (its PIECE_READ_BYTES). */
export const STAGED_PIECE_BYTES = 4 * 1024 * 1024

/**
 * Staged pieces the agent has not taken yet, at most: one it is writing and
 * one ready behind it keeps both sides busy (measured against three ahead,
 * and pieces of 2, 8 and 16 MiB: 4 MiB and two ahead was the fastest), and
 * the stage (the host's memory) holds no more than that for an upload.
 */
export const STAGED_AHEAD = 2

/** What an upload hears from the agent once it is ready: its last word, and whether it came. */
export interface UploadReply {
  readonly message: Promise<AgentMessage>
  arrived(): boolean
}

/** Sends `pieces` as data frames, in one gathered write. */
export function sendAsData(
  connection: FramedConnection,
  pieces: readonly Uint8Array[],
): Promise<void> {
  return connection.gather(() => pieces.map((piece) => connection.sendData('file', piece)))
}

/**
 * The bytes of one upload (a `write-file`, or a large file of a
 * `write-files` batch) handed to the agent as staged pieces: the source's
 * chunks are gathered into pieces of {@link STAGED_PIECE_BYTES} (cut as
 * views, never copied), each written to the stage while the source goes on
 * being read, and announced with `staged` in order; a piece the stage has no
 * room for goes as data frames in its place. The pieces are held, not
 * copied, as a Node stream's consumer holds what it is given.
 */
export class StagedSender {
  private held: Uint8Array[] = []
  private heldBytes = 0
  /** Pieces from the start of their write to the stage until the agent has them. */
  private untaken = 0
  private roomMade: (() => void) | undefined
  /** The pieces being written and announced, one after another. */
  private handing: Promise<void> = Promise.resolve()
  private readonly staged: string[] = []
  private reply: UploadReply | undefined

  constructor(
    private readonly connection: FramedConnection,
    private readonly stage: UploadStage,
  ) {}

  /** The agent took a piece (its `staged-taken`): room for another. */
  readonly taken = (): void => {
    this.untaken--
    this.roomMade?.()
  }

  /** The upload's reply once the agent is ready; its last word ends any wait for room. */
  follow(reply: UploadReply): void {
    this.reply = reply
    reply.message.finally(() => this.roomMade?.()).catch(() => {})
  }

  /** Takes a chunk of the source; a piece is handed over each time one is full. */
  async add(chunk: Uint8Array): Promise<void> {
    for (let offset = 0; offset < chunk.byteLength && !this.stopped(); ) {
      const part = chunk.subarray(offset, offset + (STAGED_PIECE_BYTES - this.heldBytes))
      offset += part.byteLength
      this.held.push(part)
      this.heldBytes += part.byteLength
      if (this.heldBytes >= STAGED_PIECE_BYTES) await this.handOver()
    }
  }

  /**
   * Once every piece handed over is announced, sends what is held (less than
   * a piece) as data frames: the upload's bytes so far have all left, in order.
   */
  async flush(): Promise<void> {
    await this.handing
    const pieces = this.held
    this.held = []
    this.heldBytes = 0
    if (pieces.length > 0 && !this.stopped()) await sendAsData(this.connection, pieces)
  }

  /**
   * After a failure: once the piece being written (if any) is done, removes
   * every piece from the stage; the agent has removed those it took already.
   */
  async abandon(): Promise<void> {
    await this.handing.catch(() => {})
    for (const name of this.staged) this.stage.discard(name)
  }

  private stopped(): boolean {
    return this.reply?.arrived() ?? false
  }

  private async handOver(): Promise<void> {
    while (this.untaken >= STAGED_AHEAD && !this.stopped())
      await new Promise<void>((resolve) => {
        this.roomMade = resolve
      })
    if (this.stopped()) return
    const pieces = this.held
    const bytes = this.heldBytes
    this.held = []
    this.heldBytes = 0
    this.untaken++
    this.handing = this.handing.then(async () => {
      const name = this.stopped() ? undefined : await this.stage.put(pieces, bytes)
      if (name === undefined) {
        this.taken()
        if (!this.stopped()) await sendAsData(this.connection, pieces)
        return
      }
      this.staged.push(name)
      await this.connection.send({ type: 'staged', name, bytes })
    })
    // Looked at by flush() or abandon(); a failed send also destroys the connection.
    this.handing.catch(() => {})
  }
}
