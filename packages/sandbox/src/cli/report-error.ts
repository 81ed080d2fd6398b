import {
  SandboxBackendNotInstalledError,
  SandboxBackendUnavailableError,
  SandboxError,
} from '@cordon/core'

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
    return
  }
  write(`cordon: ${error instanceof Error ? error.message : String(error)}`)
}
