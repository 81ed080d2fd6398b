import { closeSync, constants, openSync } from 'node:fs'
import { basename, dirname } from 'node:path'
import type { DirectoryHandles } from './directory-handles.js'
import type { PathJail } from './path-jail.js'

/**
 * Opens, for reading, a file a walk listed; undefined if it is gone, or what
 * stands there now cannot be opened as a file within the read roots. Call it
 * acting as the sandbox's user.
 *
 * `real` is where the walk found it, under the walk's resolved root, and is
 * opened without resolving it again: the file itself is not followed if it
 * became a link (`O_NOFOLLOW`), and it is opened by name in its directory as
 * `directories` opened and checked it against the roots, which also catches
 * a directory above it swapped for a link since the walk. Where that cannot
 * be done, the opened file's own descriptor is checked instead. Resolving
 * each file first as well cost a `readlink` per path component, a system
 * call that under gVisor is a round trip through its kernel. A FIFO the
 * sandbox put there opens without waiting for a writer (`O_NONBLOCK`).
 */
export function openListedFile(
  jail: PathJail,
  directories: DirectoryHandles,
  real: string,
  shown: string,
): number | undefined {
  let fd: number
  let inChecked: string | undefined
  try {
    inChecked = directories.childPath(dirname(real), basename(real), shown)
    fd = openSync(
      inChecked ?? real,
      constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY,
    )
  } catch {
    return undefined
  }
  try {
    // Without /proc to check the descriptor, the path is judged as it now resolves.
    if (
      inChecked !== undefined ||
      jail.checkOpened(fd, shown, 'read') ||
      jail.resolveForRead(real) === real
    )
      return fd
  } catch {
    // Refused: it leads outside the read roots.
  }
  closeSync(fd)
  return undefined
}
