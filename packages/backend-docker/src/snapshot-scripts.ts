/**
 * The two programs a filesystem snapshot runs inside sandboxes, with the
 * runtime's Node (so any image works), as the sandbox's own user: the
 * capture can read no more than the sandbox's commands could, and what the
 * restore writes belongs to the new sandbox's user.
 *
 * Capture writes a tar to its stdout: every directory, regular file and
 * symbolic link under the given roots, at `<prefix><root>/...`, never
 * following a link, then `<prefix>/manifest.json`. The tar's modes are
 * made readable (the new sandbox's user, another uid, reads them from the
 * image); the manifest keeps the real ones. Sockets, FIFOs, device files
 * and whatever the user cannot read are left out and listed in the
 * manifest as `skipped`.
 *
 * Restore reads the manifest and lays the files out again under the same
 * roots, with their modes and modification times.
 */

/** argv: the tar prefix (`.cordon-snapshot/<id>`), then the roots. */
export const CAPTURE_SCRIPT = String.raw`
const fs = require('fs')
const out = process.stdout
const [prefix, ...roots] = process.argv.slice(1)
let written = 0
function write(buffer) {
  written += buffer.length
  if (out.write(buffer)) return Promise.resolve()
  return new Promise((resolve) => out.once('drain', resolve))
}
function octal(value, length) {
  return value.toString(8).padStart(length - 1, '0') + '\0'
}
function paxRecord(key, value) {
  const body = ' ' + key + '=' + value + '\n'
  const length = Buffer.byteLength(body)
  let total = length + String(length).length
  if (String(total).length !== String(length).length) total = length + String(total).length
  return total + body
}
function header(name, size, mode, type, link, mtime) {
  const block = Buffer.alloc(512)
  block.write(name, 0, 100)
  block.write(octal(mode & 0o7777, 8), 100)
  block.write(octal(0, 8), 108)
  block.write(octal(0, 8), 116)
  block.write(octal(size, 12), 124)
  block.write(octal(Math.max(0, Math.floor(mtime / 1000)), 12), 136)
  block.write('        ', 148)
  block.write(type, 156)
  if (link) block.write(link, 157, 100)
  block.write('ustar\0', 257)
  block.write('00', 263)
  let sum = 0
  for (const byte of block) sum += byte
  block.write(sum.toString(8).padStart(6, '0') + '\0 ', 148)
  return block
}
function padding(size) {
  const rest = size % 512
  return rest === 0 ? Buffer.alloc(0) : Buffer.alloc(512 - rest)
}
async function entry(name, size, mode, type, link, mtime) {
  if (Buffer.byteLength(name) > 99 || (link && Buffer.byteLength(link) > 99)) {
    const pax = Buffer.from(paxRecord('path', name) + (link ? paxRecord('linkpath', link) : ''))
    await write(header('PaxHeader', pax.length, 0o644, 'x', '', mtime))
    await write(pax)
    await write(padding(pax.length))
  }
  await write(header(name.slice(0, 99), size, mode, type, link ? link.slice(0, 99) : '', mtime))
}
async function copyFile(path, name, stat) {
  let fd
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
  } catch (error) {
    return false
  }
  try {
    const opened = fs.fstatSync(fd)
    if (!opened.isFile()) return false
    const size = opened.size
    await entry(name, size, opened.mode | 0o444, '0', '', opened.mtimeMs)
    const chunk = Buffer.alloc(1 << 16)
    let done = 0
    while (done < size) {
      const read = fs.readSync(fd, chunk, 0, Math.min(chunk.length, size - done), null)
      // A file that shrank while it was read is padded to the size its header gave.
      if (read === 0) {
        await write(Buffer.alloc(size - done))
        break
      }
      await write(Buffer.from(chunk.subarray(0, read)))
      done += read
    }
    await write(padding(size))
    return { mode: opened.mode & 0o7777, mtime: opened.mtimeMs }
  } finally {
    fs.closeSync(fd)
  }
}
async function main() {
  const entries = []
  const skipped = []
  let parent = ''
  for (const part of prefix.split('/')) {
    parent = parent ? parent + '/' + part : part
    await entry(parent + '/', 0, 0o755, '5', '', Date.now())
  }
  await entry(prefix + '/files/', 0, 0o755, '5', '', Date.now())
  async function walk(path) {
    let stat
    try {
      stat = fs.lstatSync(path)
    } catch {
      skipped.push(path)
      return
    }
    const name = prefix + '/files' + path
    if (stat.isDirectory()) {
      let names
      try {
        names = fs.readdirSync(path).sort()
      } catch {
        skipped.push(path)
        return
      }
      await entry(name + '/', 0, stat.mode | 0o555, '5', '', stat.mtimeMs)
      entries.push({ path, kind: 'directory', mode: stat.mode & 0o7777, mtime: stat.mtimeMs })
      for (const child of names) await walk(path === '/' ? '/' + child : path + '/' + child)
    } else if (stat.isSymbolicLink()) {
      const link = fs.readlinkSync(path)
      await entry(name, 0, 0o777, '2', link, stat.mtimeMs)
      entries.push({ path, kind: 'link', link, mtime: stat.mtimeMs })
    } else if (stat.isFile()) {
      const copied = await copyFile(path, name, stat)
      if (copied) entries.push({ path, kind: 'file', mode: copied.mode, mtime: copied.mtime })
      else skipped.push(path)
    } else skipped.push(path)
  }
  for (const root of roots) {
    let names
    try {
      names = fs.readdirSync(root).sort()
    } catch {
      skipped.push(root)
      continue
    }
    for (const child of names) await walk(root + '/' + child)
  }
  const manifest = Buffer.from(JSON.stringify({ roots, entries, skipped }))
  await entry(prefix + '/manifest.json', manifest.length, 0o444, '0', '', Date.now())
  await write(manifest)
  await write(padding(manifest.length))
  await write(Buffer.alloc(1024))
  process.stderr.write('cordon-snapshot-bytes=' + written + '\n')
}
main().catch((error) => {
  process.stderr.write(String(error && error.stack || error) + '\n')
  process.exit(1)
})
`

/** argv: the snapshot's directory in the image (`/.cordon-snapshot/<id>`). */
export const RESTORE_SCRIPT = `
const fs = require('fs')
const [dir] = process.argv.slice(1)
const manifest = JSON.parse(fs.readFileSync(dir + '/manifest.json', 'utf8'))
const directories = []
for (const entry of manifest.entries) {
  const source = dir + '/files' + entry.path
  if (entry.kind === 'directory') {
    fs.mkdirSync(entry.path, { recursive: true, mode: 0o700 })
    directories.push(entry)
  } else if (entry.kind === 'file') {
    fs.copyFileSync(source, entry.path)
    fs.chmodSync(entry.path, entry.mode & 0o1777)
    fs.utimesSync(entry.path, entry.mtime / 1000, entry.mtime / 1000)
  } else if (entry.kind === 'link') {
    fs.rmSync(entry.path, { force: true })
    fs.symlinkSync(entry.link, entry.path)
  }
}
// Last, deepest first: a directory made read-only still took its children.
for (const entry of directories.reverse()) {
  fs.chmodSync(entry.path, entry.mode & 0o1777)
  fs.utimesSync(entry.path, entry.mtime / 1000, entry.mtime / 1000)
}
`
