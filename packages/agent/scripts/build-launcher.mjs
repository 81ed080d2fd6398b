// Compiles cordon-launcher (launcher/cordon-launcher.c, with launcher/kill-user.c), the small program the
// agent starts commands through, into dist/launcher/linux-<arch>/. Statically
// linked, so it runs in any image on that architecture whatever its libc.
// Beside it on x86-64, cordon-startup-clock.so (launcher/startup-clock.c),
// which the agent's loader preloads in a gVisor sandbox: shared, since it is
// loaded into the runtime's Node, and linked to the runtime's glibc.
// Built for this machine's architecture with `cc`, and for the other one too
// when its cross compiler is installed (Debian: gcc-aarch64-linux-gnu or
// gcc-x86-64-linux-gnu); a backend finds no launcher for an architecture it
// was not built for, and its agents then start commands with Node's spawn.
import { execFileSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { arch, platform } from 'node:os'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const sources = [`${root}launcher/cordon-launcher.c`, `${root}launcher/kill-user.c`]
const FLAGS = ['-std=c11', '-O2', '-static', '-s', '-Wall', '-Wextra', '-Werror']
const clockSource = `${root}launcher/startup-clock.c`
const CLOCK_FLAGS = ['-std=c11', '-O2', '-shared', '-fPIC', '-s', '-Wall', '-Wextra', '-Werror']

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
  execFileSync(compiler, [...FLAGS, '-o', `${outDir}/cordon-launcher`, ...sources], {
    stdio: 'inherit',
  })
  // It reads the time-stamp counter: written for x86-64, and only built there.
  if (target === 'x64') {
    execFileSync(
      compiler,
      [...CLOCK_FLAGS, '-o', `${outDir}/cordon-startup-clock.so`, clockSource],
      {
        stdio: 'inherit',
      },
    )
  }
}
