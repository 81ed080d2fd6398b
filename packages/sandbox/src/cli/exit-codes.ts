/** cordon's own failures use 125, as `docker run` does, so they differ from any command's exit code. */
export const EXIT_CORDON_FAILURE = 125
export const EXIT_USAGE = 64
/**
 * A reader of cordon's output went away (EPIPE): 128 + SIGPIPE, what a shell
 * reports for a program that a closed pipe ended.
 */
export const EXIT_BROKEN_PIPE = 141
