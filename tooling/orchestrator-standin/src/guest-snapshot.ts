import { randomBytes } from 'node:crypto'
import { constants, createWriteStream } from 'node:fs'
import { chmod, copyFile, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { GUEST_OUTPUTS_DIR, GUEST_RUN_DIR, type Guest } from './guest-container.js'

/**
 * What a guest can change, relative to `/`: everything else is its template
 * image, mounted read-only. The run directory (agent socket, secret file) is
 * the orchestrator's and never captured.
 */
export const GUEST_WRITABLE_PATHS = [GUEST_OUTPUTS_DIR.slice(1), 'tmp'] as const

/**
 * Captures a guest's writable filesystem into `archivePath` (a tar archive):
 * `tar` runs inside the guest as its own user and writes to standard output,
 * so the guest never names a host path, and reads only what its own code
 * could. Sockets are skipped (they mean nothing outside the running guest).
 * Returns the archive's size in bytes.
 */
export async function captureGuestFilesystem(guest: Guest, archivePath: string): Promise<number> {
  const archive = createWriteStream(archivePath, { flags: 'wx', mode: 0o600 })
  const through = new PassThrough()
  const written = pipeline(through, archive)
  try {
    await guest.run(['tar', '-cf', '-', '-C', '/', ...GUEST_WRITABLE_PATHS], through)
  } catch (error) {
    through.destroy()
    await written.catch(() => {})
    await rm(archivePath, { force: true })
    throw error
  }
  through.end()
  await written
  return (await stat(archivePath)).size
}

/**
 * Restores an archive made by {@link captureGuestFilesystem} into a guest
 * that has just started (before anyone can reach its agent): the archive is
 * copied into the guest's run directory under a fresh name (never over an
 * existing file), opened there by the guest's root (the sandbox's uid cannot
 * enter the run directory), and unpacked from that descriptor by `tar`
 * running as the guest's sandbox uid, so it writes only what that uid may;
 * then removed.
 */
export async function restoreGuestFilesystem(guest: Guest, archivePath: string): Promise<void> {
  const name = `restore-${randomBytes(8).toString('hex')}.tar`
  const hostCopy = join(guest.runDir, name)
  await copyFile(archivePath, hostCopy, constants.COPYFILE_EXCL)
  try {
    await chmod(hostCopy, 0o444)
    await guest.runAsAgent([
      'node',
      '-e',
      UNPACK_AS_SANDBOX_USER,
      `${GUEST_RUN_DIR}/${name}`,
      String(guest.sandboxUid),
    ])
  } finally {
    await rm(hostCopy, { force: true })
  }
}

/**
 * Opens the archive (argv[1]) as root, drops every identity to the sandbox's
 * uid (argv[2]), and unpacks it from standard input: the guest has no
 * setpriv, and its shell's redirection would keep root for `tar` itself.
 */
const UNPACK_AS_SANDBOX_USER = `
const { openSync } = require('node:fs')
const { spawnSync } = require('node:child_process')
const archive = openSync(process.argv[1], 'r')
const uid = Number(process.argv[2])
process.setgroups([])
process.setgid(uid)
process.setuid(uid)
const result = spawnSync('tar', ['-xf', '-', '-C', '/'], { stdio: [archive, 'inherit', 'inherit'] })
process.exit(result.status ?? 1)
`
