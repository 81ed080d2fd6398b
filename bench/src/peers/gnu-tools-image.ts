/**
 * The image the agent-framework scenario runs both arms on: the bench's
 * busybox image plus the host's GNU `realpath` and `find` (and the shared
 * libraries they load). The OpenAI Agents SDK's `DockerSandboxClient`
 * resolves every path with `/usr/bin/realpath -m` and lists directories with
 * `find -printf`, which busybox lacks; cordon needs nothing from an image.
 * Built locally from files already on this machine: nothing is pulled.
 */
import { execFileSync } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { BENCH_IMAGE, docker, run } from '../engine.js'

export const GNU_TOOLS_IMAGE = 'cordon-bench/busybox-gnu-tools:latest'
const TOOLS = ['/usr/bin/realpath', '/usr/bin/find']

/** Builds the image unless it exists; returns its reference. */
export async function ensureGnuToolsImage(): Promise<string> {
  const exists = await docker
    .getImage(GNU_TOOLS_IMAGE)
    .inspect()
    .then(
      () => true,
      () => false,
    )
  if (exists) return GNU_TOOLS_IMAGE
  const context = mkdtempSync(join(tmpdir(), 'cordon-bench-gnu-'))
  try {
    for (const file of [...TOOLS, ...TOOLS.flatMap(sharedLibraries)]) {
      const target = join(context, 'rootfs', file)
      mkdirSync(dirname(target), { recursive: true })
      cpSync(file, target, { dereference: true })
    }
    writeFileSync(join(context, 'Dockerfile'), `FROM ${BENCH_IMAGE}\nCOPY rootfs/ /\n`)
    await run('docker', ['build', '-q', '-t', GNU_TOOLS_IMAGE, context])
  } finally {
    rmSync(context, { recursive: true, force: true })
  }
  return GNU_TOOLS_IMAGE
}

/** The absolute paths of the shared libraries (and loader) a binary loads, from `ldd`. */
function sharedLibraries(binary: string): string[] {
  return execFileSync('ldd', [binary], { encoding: 'utf8' })
    .split('\n')
    .flatMap((line) => /(\/\S+) \(0x/.exec(line)?.slice(1, 2) ?? [])
}
