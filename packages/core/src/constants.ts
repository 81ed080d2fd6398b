/**
 * Defaults shared by every backend, with the reference's names and values so a
 * host that imports them keeps the numbers it was written against.
 */

/** Default timeout of one `exec`, in ms, when neither the call, the sandbox nor the provider sets one. */
export const SANDBOX_DEFAULT_TIMEOUT_MS = 30_000

/** Default memory limit of a sandbox, in MiB. */
export const SANDBOX_DEFAULT_MEMORY_LIMIT_MB = 512

/** Default cap on the processes (and threads) a sandbox's commands may run at once. */
export const SANDBOX_DEFAULT_MAX_PROCESSES = 32

/** Default cap on the bytes of each output stream kept in an exec result. */
export const SANDBOX_MAX_OUTPUT_BYTES = 10 * 1024 * 1024

/**
 * Default cap on one file a whole-file read (`readFile`, `readFiles`) brings
 * into host memory: what a sandbox writes must not decide how much memory
 * its host uses. Larger files are read with `readFileStream`.
 */
export const SANDBOX_DEFAULT_MAX_READ_BYTES = 256 * 1024 * 1024

/** The most sandboxes one `fork()` makes. */
export const SANDBOX_FORK_MAX = 16
