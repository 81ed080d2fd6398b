import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, openSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { BUSYBOX_IMAGE } from '@cordon/test-support'
import Docker from 'dockerode'
import { afterAll, beforeAll } from 'vitest'

/**
 * A Docker Engine of a test's own, to restart at will without touching the
 * engine every other test (and every other package's tests, running at the
 * same time) uses: its own socket, data and exec roots, containerd and
 * bridge. It holds the busybox test image, copied from the main engine.
 * Needs root, `dockerd` and `ip`, as CI has.
 */
export class PrivateEngine {
  readonly root = mkdtempSync('/tmp/cordon-engine-')
  readonly socketPath = join(this.root, 'docker.sock')
  readonly docker = new Docker({ socketPath: this.socketPath })
  /**
   * A bridge of its own: with `--bridge none` dockerd deletes the host's
   * `docker0`, which the main engine's containers use.
   */
  private readonly bridge = `cdf${this.root.slice(-6).replace(/[^A-Za-z0-9]/g, 'x')}`
  private bridgeMade = false

  async start(): Promise<void> {
    // A killed engine leaves pid files: dockerd refuses to start over its own, and
    // takes containerd's for a running containerd (the pid may be reused by then).
    rmSync(join(this.root, 'docker.pid'), { force: true })
    rmSync(join(this.root, 'exec', 'containerd', 'containerd.pid'), { force: true })
    if (!this.bridgeMade) {
      const subnet = 200 + Math.floor(Math.random() * 50)
      execFileSync('sh', [
        '-c',
        `ip link add ${this.bridge} type bridge && ip addr add 10.213.${subnet}.1/24 dev ${this.bridge} && ip link set ${this.bridge} up`,
      ])
      this.bridgeMade = true
    }
    const daemon = spawn(
      'dockerd',
      [
        '--host',
        `unix://${this.socketPath}`,
        '--data-root',
        join(this.root, 'data'),
        '--exec-root',
        join(this.root, 'exec'),
        '--pidfile',
        join(this.root, 'docker.pid'),
        '--bridge',
        this.bridge,
        '--iptables=false',
        '--ip-masq=false',
        '--ip-forward=false',
      ],
      {
        detached: true,
        stdio: ['ignore', 'ignore', openSync(join(this.root, 'dockerd.log'), 'a')],
      },
    )
    daemon.unref()
    for (let waited = 0; ; waited += 100) {
      if (
        await this.docker.ping().then(
          () => true,
          () => false,
        )
      )
        break
      if (waited > 30_000)
        throw new Error(
          `the private engine did not start in 30 s: ${readFileSync(
            join(this.root, 'dockerd.log'),
            'utf8',
          )
            .split('\n')
            .filter((line) => /level=(error|fatal|warning)|failed|Error/.test(line))
            .slice(-15)
            .join('\n')}`,
        )
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  /** Copies the test image from the main engine (once; the data root keeps it across restarts). */
  loadTestImage(): void {
    execFileSync('sh', [
      '-c',
      `docker save ${BUSYBOX_IMAGE} | docker -H unix://${this.socketPath} load -q`,
    ])
  }

  /**
   * Stops the engine, as `systemctl restart docker` does (SIGTERM: the daemon
   * stops its containers and its containerd) or as a crash does (SIGKILL:
   * the daemon and its containerd are killed where they stand); resolves
   * when every process of it is gone.
   */
  async stop(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    let pid: number | undefined
    try {
      pid = Number(readFileSync(join(this.root, 'docker.pid'), 'utf8'))
    } catch {}
    const victims = pid ? [pid, ...this.helpers()] : this.helpers()
    for (const victim of signal === 'SIGKILL' ? victims : victims.slice(0, 1)) {
      try {
        process.kill(victim, signal)
      } catch {}
    }
    for (let waited = 0; ; waited += 100) {
      const alive = [...(pid ? [pid] : []), ...this.helpers()].filter((victim) => {
        try {
          process.kill(victim, 0)
          return true
        } catch {
          return false
        }
      })
      if (alive.length === 0) return
      // A graceful stop that left its containerd behind gets it killed after 15 s.
      if (waited === 15_000) for (const victim of alive) process.kill(victim, 'SIGKILL')
      if (waited > 30_000) throw new Error('the private engine did not stop in 30 s')
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  /**
   * This engine's containerd, shims and container processes: those whose
   * command line names its root, or whose root or working directory is
   * inside it (a container's processes, a `runc init` cut off mid-create).
   */
  private helpers(): number[] {
    const found: number[] = []
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name) || Number(name) === process.pid) continue
      try {
        const mine =
          readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(this.root) ||
          readlinkSync(`/proc/${name}/root`).startsWith(this.root) ||
          readlinkSync(`/proc/${name}/cwd`).startsWith(this.root)
        if (mine) found.push(Number(name))
      } catch {}
    }
    return found
  }

  /** Stops the daemon and removes everything it had. */
  async remove(): Promise<void> {
    await this.stop('SIGTERM')
    // Its containerd's shims and mounts go with the exec root.
    execFileSync('sh', [
      '-c',
      `grep -o " ${this.root}/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l`,
    ])
    rmSync(this.root, { recursive: true, force: true })
    if (this.bridgeMade) execFileSync('ip', ['link', 'del', this.bridge])
  }
}

/**
 * A private engine for the enclosing `describe`: started, with the test
 * image, before its tests and removed after them.
 */
export function privateEngineForSuite(): PrivateEngine {
  const engine = new PrivateEngine()
  beforeAll(async () => {
    await engine.start()
    engine.loadTestImage()
  }, 60_000)
  afterAll(async () => {
    await engine.remove()
  }, 60_000)
  return engine
}
