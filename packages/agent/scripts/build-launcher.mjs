// Compiles cordon-launcher (launcher/cordon-launcher.c), the small program the
// agent starts commands through, into dist/launcher/linux-<arch>/. Statically
// linked, so it runs in any image on that architecture whatever its libc.
// Built for this machine's architecture with `cc`, and for the other one too
// when its cross compiler is installed (Debian: gcc-aarch64-linux-gnu or
// gcc-x86-64-linux-gnu); a backend finds no launcher for an architecture it
// was not built for, and its agents then start commands with Node's spawn.
import { execFileSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { arch, platform } from 'node:os'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const source = `${root}launcher/cordon-launcher.c`
const FLAGS = ['-std=c11', '-O2', '-static', '-s', '-Wall', '-Wextra', '-Werror']

if (platform() !== 'linux') {
  console.log(`build-launcher: not on Linux (${platform()}); no launcher built`)
  process.exit(0)
}
const compilers = {
  x64: arch() === 'x64' ? 'cc' : 'x86_64-linux-gnu-gcc',
  arm64: arch() === 'arm64' ? 'cc' : 'aarch64-linux-gnu-gcc',
}
for (const [target, compiler] of Object.entries(compilers)) {
  const native = target === arch()
  try {
    execFileSync(compiler, ['--version'], { stdio: 'ignore' })
  } catch {
    if (native)
      throw new Error(
        `build-launcher: no C compiler (${compiler}); install one (Debian: apt-get install gcc libc6-dev, which tooling/engine/setup.sh does)`,
      )
    continue
  }
  const outDir = `${root}dist/launcher/linux-${target}`
  mkdirSync(outDir, { recursive: true })
  execFileSync(compiler, [...FLAGS, '-o', `${outDir}/cordon-launcher`, source], {
    stdio: 'inherit',
  })
}
