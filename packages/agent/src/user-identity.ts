/**
 * Acting as the sandbox's user, for the agent that runs as root.
 *
 * The agent starts commands as the sandbox's user and must do its file
 * operations with that user's rights too: a path the sandbox controls (a
 * symbolic link in its outputs) must not let the host read or write what the
 * user cannot. Every path-based system call of a file operation (resolve,
 * open, mkdir, rename, unlink, readdir, stat) therefore runs synchronously
 * with the agent's effective uid and gid switched to the user's, and back to
 * root before anything else can run. Reads and writes then go through the
 * opened descriptor, which the kernel checked at open and which needs no
 * rights of its own.
 *
 * A switch is process-wide. Because it is synchronous, no other JavaScript
 * runs inside it; a descriptor read or write on the thread pool that happens
 * to run meanwhile is not checked against the effective ids, and nothing
 * path-based is ever queued to the pool by the agent while it runs as root
 * on the user's behalf. An operation can thus only ever run with less right
 * than root, never with more than the user.
 */

/** Runs a synchronous operation as some identity and returns its result. */
export type ActAs = <T>(operation: () => T) => T

/** The process acts as itself (the agent already is the sandbox's user). */
export const actAsItself: ActAs = (operation) => operation()

/**
 * Drops the supplementary groups root starts with (they would otherwise
 * still grant group access while the effective ids are the user's), and
 * returns the switch to `user`'s effective ids for root's synchronous work.
 * Anything but root gets {@link actAsItself}.
 */
export function actAsUser(user: { readonly uid: number; readonly gid: number }): ActAs {
  if (typeof process.seteuid !== 'function' || process.geteuid?.() !== 0) return actAsItself
  process.setgroups?.([])
  return (operation) => {
    process.setegid!(user.gid)
    process.seteuid!(user.uid)
    try {
      return operation()
    } finally {
      process.seteuid!(0)
      process.setegid!(0)
    }
  }
}
