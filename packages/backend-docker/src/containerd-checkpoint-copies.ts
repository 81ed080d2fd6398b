import { closeSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'

/**
 * What a start from a checkpoint leaves behind in containerd, and how it is
 * taken back.
 *
 * To start a container from a checkpoint, the engine uploads the
 * checkpoint into containerd's content store, and containerd unpacks it
 * into a fresh temporary directory (`ctrd-checkpoint<random>` under its
 * `XDG_RUNTIME_DIR`, else its `TMPDIR`, else `/tmp`) for the runtime to
 * restore from. containerd never removes that directory
 * (containerd/containerd#10166, still so in the 1.6 of this project's
 * machines): each restore of a memory snapshot would leave a full copy of
 * its checkpoint on the engine's disk, megabytes to hundreds of megabytes
 * per fork. The copy is needed only while the runtime restores from it, so
 * the start that caused it removes it once the start has returned.
 *
 * Which directory is this start's: one whose `checkpoint.img` is byte for
 * byte the snapshot's and that appeared since the start began. Starts of
 * one checkpoint are serialised across host processes (checkpoint-start-lock.ts), so no
 * other start's copy of the same checkpoint can be waiting to be read.
 */

/** The prefix containerd gives the directories it unpacks checkpoints into. */
const CONTAINERD_COPY_PREFIX = 'ctrd-checkpoint'

/** The file of a gVisor checkpoint that holds the sandbox's state (the only one it writes). */
export const CHECKPOINT_IMAGE = 'checkpoint.img'

/**
 * The directories containerd unpacks checkpoints into, as this host can
 * reach them: through `/proc/<pid>/root` of each containerd process, so a
 * containerd in another mount namespace (an engine in a container) is
 * reached as well as one beside this host. Found once and kept while those
 * processes are still containerd: finding them reads every process's name,
 * milliseconds on each restore of a busy host otherwise.
 */
export function containerdTemporaryDirectories(): string[] {
  if (found?.length && found.every(({ pid }) => isContainerd(pid)))
    return found.map(({ dir }) => dir)
  found = findContainerdTemporaryDirectories()
  return found.map(({ dir }) => dir)
}

let found: Array<{ readonly pid: string; readonly dir: string }> | undefined

function isContainerd(pid: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'containerd'
  } catch {
    return false
  }
}

function findContainerdTemporaryDirectories(): Array<{ pid: string; dir: string }> {
  let pids: string[]
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name))
  } catch {
    return []
  }
  const dirs = new Map<string, string>()
  for (const pid of pids) {
    if (!isContainerd(pid)) continue
    try {
      const environment = new Map(
        readFileSync(`/proc/${pid}/environ`, 'utf8')
          .split('\0')
          .map((entry) => {
            const at = entry.indexOf('=')
            return [entry.slice(0, at), entry.slice(at + 1)] as const
          }),
      )
      // Go's os.MkdirTemp(os.Getenv("XDG_RUNTIME_DIR"), ...): an empty
      // directory means os.TempDir(), which is $TMPDIR or /tmp.
      const base = environment.get('XDG_RUNTIME_DIR') || environment.get('TMPDIR') || '/tmp'
      const dir = join(`/proc/${pid}/root`, base)
      if (![...dirs.values()].includes(dir)) dirs.set(pid, dir)
    } catch {
      // A process that ended while it was read, or one this host may not read.
    }
  }
  return [...dirs].map(([pid, dir]) => ({ pid, dir }))
}

/** Whether two files hold the same bytes (read in pieces: a checkpoint may be hundreds of MB). */
function sameBytes(a: string, b: string, size: number): boolean {
  const piece = 1024 * 1024
  const left = Buffer.allocUnsafe(piece)
  const right = Buffer.allocUnsafe(piece)
  const fdA = openSync(a, 'r')
  try {
    const fdB = openSync(b, 'r')
    try {
      for (let at = 0; at < size; at += piece) {
        const length = Math.min(piece, size - at)
        if (readSync(fdA, left, 0, length, at) !== length) return false
        if (readSync(fdB, right, 0, length, at) !== length) return false
        if (!left.subarray(0, length).equals(right.subarray(0, length))) return false
      }
      return true
    } finally {
      closeSync(fdB)
    }
  } finally {
    closeSync(fdA)
  }
}

/**
 * The copies containerd unpacked of `checkpointImage` since `sinceMs` (wall
 * clock; 0 for any age), by directory. Never throws: what cannot be read is
 * not counted.
 */
export function findContainerdCopies(
  checkpointImage: string,
  sinceMs: number,
  directories: readonly string[] = containerdTemporaryDirectories(),
): string[] {
  const found: string[] = []
  let size: number
  try {
    size = statSync(checkpointImage).size
  } catch {
    return found
  }
  for (const directory of directories) {
    let names: string[]
    try {
      names = readdirSync(directory).filter((name) => name.startsWith(CONTAINERD_COPY_PREFIX))
    } catch {
      continue
    }
    for (const name of names) {
      const copy = join(directory, name)
      try {
        const image = join(copy, CHECKPOINT_IMAGE)
        // The directory is made when the unpacking starts; a second of slack
        // covers a clock that ticks coarsely on the engine's filesystem.
        if (statSync(copy).mtimeMs < sinceMs - 1_000) continue
        if (statSync(image).size !== size) continue
        if (sameBytes(image, checkpointImage, size)) found.push(copy)
      } catch {
        // Gone already, or not this host's to read.
      }
    }
  }
  return found
}

/**
 * Removes the copies containerd unpacked of `checkpointImage` since
 * `sinceMs`: what a start from that checkpoint left behind. Returns the
 * directories removed. Never throws: a copy that cannot be removed is the
 * engine's leftover, not a failed start.
 */
export function removeContainerdCopies(checkpointImage: string, sinceMs: number): string[] {
  const removed: string[] = []
  for (const copy of findContainerdCopies(checkpointImage, sinceMs)) {
    try {
      rmSync(copy, { recursive: true, force: true })
      removed.push(copy)
    } catch {
      // Not this host's to remove.
    }
  }
  return removed
}
