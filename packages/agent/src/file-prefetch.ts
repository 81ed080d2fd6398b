import { closeSync, fstatSync, readSync } from 'node:fs'
import type { DirectoryHandles } from './directory-handles.js'
import { openListedFile } from './listed-file.js'
import type { PathJail } from './path-jail.js'

/** Files of at most this many bytes are read while listing. */
const FILE_BYTES = 64 * 1024
/**
 * What a batch reads while listing, at most: what it holds until the host
 * proceeds, and what it read of files too large to hold. The latter counts
 * so that a tree of large files is opened twice (here, then after
 * `proceed`) for its first few dozen files only.
 */
const READ_BYTES = 4 * 1024 * 1024

/** What reading a file while listing found (see {@link FilePrefetch.read}). */
export type ReadWhileListing =
  /** Read and held: it is listed by the bytes read, without a time. */
  | { readonly size: number }
  /** Too large to hold: listed from its opened descriptor, read after `proceed` as without this. */
  | { readonly size: number; readonly modifiedMs: number }
  /** Not a regular file by now, or gone: not listed. */
  | 'skip'

/**
 * The small files of a `read-files` batch, read while the walk lists them.
 *
 * A listing gives the host every file's size before any byte is sent, so a
 * file over the caller's limit is refused first; a plain listing asks each
 * file's size (`lstat`), and the read after `proceed` opens, reads and
 * closes it: four system calls a file. Inside gVisor (this runsc's ptrace
 * platform) a system call costs about 65 µs, and a 2,000-file download spent
 * about 130 ms in the listing's `lstat`s alone (bench/misses.md, issue 30).
 * Read while listing, a small file costs three: its size is the bytes read,
 * and it is sent from memory once the host proceeds. What is held is
 * bounded ({@link READ_BYTES}); past that, and for larger files, the batch
 * lists and reads as before. A file read so is sent as it was when listed,
 * not as it is when the host proceeds: either is a moment of a tree the
 * sandbox may be changing. The reads are the user's: call it acting as the
 * sandbox's user, as the walk is.
 */
export class FilePrefetch {
  private readonly held = new Map<string, Buffer>()
  private readBytes = 0
  private readonly scratch = Buffer.allocUnsafe(FILE_BYTES + 1)

  constructor(
    private readonly jail: PathJail,
    private readonly directories: DirectoryHandles,
  ) {}

  /**
   * Reads the file the walk found at `real` (listed as `shown`) if there is
   * room to hold it; undefined if there is none, and the walk lists it on
   * its own.
   */
  read(real: string, shown: string): ReadWhileListing | undefined {
    const room = Math.min(FILE_BYTES, READ_BYTES - this.readBytes)
    if (room <= 0) return undefined
    const fd = openListedFile(this.jail, this.directories, real, shown)
    if (fd === undefined) return 'skip'
    try {
      // One more byte than there is room for tells a larger file from one that fits.
      const read = readSync(fd, this.scratch, 0, room + 1, null)
      this.readBytes += read
      // Nothing read: an empty file, or something else (a FIFO without a writer).
      if (read === 0) {
        if (!fstatSync(fd).isFile()) return 'skip'
      } else if (read > room) {
        const info = fstatSync(fd)
        if (!info.isFile()) return 'skip'
        return { size: info.size, modifiedMs: Math.floor(info.mtimeMs) }
      }
      // A regular file gives all it has up to the length asked: a short read is its end.
      const content = Buffer.from(this.scratch.subarray(0, read))
      this.held.set(shown, content)
      return { size: read }
    } catch {
      // A directory in its place since the listing fails the read.
      return 'skip'
    } finally {
      closeSync(fd)
    }
  }

  /** The bytes held for the file listed as `shown`, handed over once; undefined if none are. */
  take(shown: string): Buffer | undefined {
    const content = this.held.get(shown)
    if (content !== undefined) this.held.delete(shown)
    return content
  }
}
