import { closeSync, fstatSync, openSync, readSync } from 'node:fs'

/** Linux's fixed device number of /dev/urandom, major 1 and minor 9, as makedev(1, 9) encodes it. */
const URANDOM_DEVICE = 0x109

let urandom: number | undefined | null = null

/**
 * Bytes from the kernel's random generator. Read from /dev/urandom rather
 * than through `node:crypto`, whose loading costs the agent's start about
 * 6 ms (see protocol/sha256.ts). The file is used only if it is the kernel's
 * device (a character device numbered 1:9; a sandboxed user cannot make
 * one, and under gVisor the sentry serves the same number); anywhere else,
 * `node:crypto` is loaded and used instead.
 */
export function randomBytes(size: number): Buffer {
  const bytes = Buffer.allocUnsafe(size)
  const fd = urandomDescriptor()
  if (fd === undefined) return process.getBuiltinModule('node:crypto').randomBytes(size)
  let filled = 0
  while (filled < size) {
    const read = readSync(fd, bytes, filled, size - filled, null)
    if (read <= 0) throw new Error('/dev/urandom returned no bytes')
    filled += read
  }
  return bytes
}

function urandomDescriptor(): number | undefined {
  if (urandom !== null) return urandom
  urandom = undefined
  let fd: number
  try {
    fd = openSync('/dev/urandom', 'r')
  } catch {
    return undefined
  }
  const stat = fstatSync(fd)
  if (stat.isCharacterDevice() && stat.rdev === URANDOM_DEVICE) urandom = fd
  else closeSync(fd)
  return urandom
}
