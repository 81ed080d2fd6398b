import { posix } from 'node:path'

/**
 * A path as a host names it inside a sandbox (a command's `cwd`, the
 * sandbox's `workingDirectory`, a file path), made absolute: a relative one
 * resolves against the sandbox's `rootDir`, as the reference resolved a
 * relative `cwd` against its workspace root. `.` and `..` segments are
 * collapsed; where the result may lead is judged inside the sandbox, by the
 * agent's path jail.
 */
export function resolveSandboxPath(rootDir: string, path: string): string {
  return posix.resolve(rootDir, path)
}
