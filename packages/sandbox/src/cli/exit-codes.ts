/** cordon's own failures use 125, as `docker run` does, so they differ from any command's exit code. */
export const EXIT_CORDON_FAILURE = 125
export const EXIT_USAGE = 64
