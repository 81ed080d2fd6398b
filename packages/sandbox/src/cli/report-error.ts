import {
  SandboxBackendNotInstalledError,
  SandboxBackendUnavailableError,
  SandboxCreateTimeoutError,
  SandboxError,
} from '@cordon/core'

/** How the Docker backend names a create's step of pulling its image: `pulling the image <ref>`. */
const PULLING_THE_IMAGE = 'pulling the image '

/** Prints an error the way a person at a terminal needs it: what failed and what to do. */
export function reportError(
  error: unknown,
  write: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): void {
  if (SandboxBackendNotInstalledError.isInstance(error)) {
    write(`cordon: ${error.message}`)
    return
  }
  if (SandboxBackendUnavailableError.isInstance(error)) {
    // The engine itself is missing or down; images are another matter (SandboxImagePullError).
    write(`cordon: ${error.message}`)
    write(
      "cordon: on a Debian machine, `bash tooling/engine/setup.sh` in cordon's repository installs and starts the engine (as root).",
    )
    return
  }
  if (SandboxError.isInstance(error)) {
    write(`cordon: ${error.message} [${error.code}]`)
    // `run` and `shell` pull before they create; a create that still ran out of time
    // pulling (the image went from the engine in between) is told where the pull belongs.
    if (SandboxCreateTimeoutError.isInstance(error) && error.phase?.startsWith(PULLING_THE_IMAGE))
      write(
        `cordon: pull it with no deadline first: cordon prepare --image ${error.phase.slice(PULLING_THE_IMAGE.length)} (or give the sandbox longer to start with --ready-timeout)`,
      )
    return
  }
  write(`cordon: ${error instanceof Error ? error.message : String(error)}`)
}
