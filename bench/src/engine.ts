import { execFile, spawn } from 'node:child_process'
import Docker from 'dockerode'

/** Every container and volume the bench makes carries this label, so all of it can be removed. */
export const BENCH_LABEL_KEY = 'cordon-test.run'
export const BENCH_LABEL_VALUE = 'bench'
export const BENCH_LABELS: Record<string, string> = { [BENCH_LABEL_KEY]: BENCH_LABEL_VALUE }

/** The one image every container bench starts; built locally by tooling/engine/setup.sh. */
export const BENCH_IMAGE = process.env.CORDON_BENCH_IMAGE ?? 'cordon-test/busybox:latest'

export const docker = new Docker({
  socketPath: process.env.DOCKER_HOST?.startsWith('unix://')
    ? process.env.DOCKER_HOST.slice(7)
    : '/var/run/docker.sock',
})

/** Fails early, with the fix, when the engine or the image is missing; never pulls. */
export async function checkEngine(): Promise<void> {
  try {
    await docker.ping()
  } catch (error) {
    throw new Error(
      `the Docker Engine does not answer (${(error as Error).message}); run: bash tooling/engine/setup.sh`,
    )
  }
  try {
    await docker.getImage(BENCH_IMAGE).inspect()
  } catch {
    throw new Error(
      `image ${BENCH_IMAGE} is missing (no registry is reachable, so it is never pulled); run: bash tooling/engine/setup.sh`,
    )
  }
}

/** Removes every container and volume carrying the bench label. Safe to call at any time. */
export async function removeBenchResources(): Promise<{ containers: number; volumes: number }> {
  const label = `${BENCH_LABEL_KEY}=${BENCH_LABEL_VALUE}`
  const containers = await docker.listContainers({ all: true, filters: { label: [label] } })
  await Promise.all(
    containers.map((info) =>
      docker
        .getContainer(info.Id)
        .remove({ force: true, v: true })
        .catch(() => {}),
    ),
  )
  const { Volumes } = await docker.listVolumes({ filters: { label: [label] } })
  await Promise.all(
    (Volumes ?? []).map((volume) =>
      docker
        .getVolume(volume.Name)
        .remove({ force: true })
        .catch(() => {}),
    ),
  )
  return { containers: containers.length, volumes: (Volumes ?? []).length }
}

export async function removeContainer(idOrName: string): Promise<void> {
  await docker
    .getContainer(idOrName)
    .remove({ force: true, v: true })
    .catch(() => {})
}

export async function removeVolume(name: string): Promise<void> {
  await docker
    .getVolume(name)
    .remove({ force: true })
    .catch(() => {})
}

/** Runs a command to completion and returns its stdout; rejects with stderr on a non-zero exit. */
export function run(command: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error)
        reject(new Error(`${command} ${args.join(' ')}: ${stderr.trim() || error.message}`))
      else resolve(stdout)
    })
  })
}

/**
 * Runs a command with its output discarded (`docker cp` of 100 MiB prints a
 * progress line; nothing is buffered in this process).
 */
export function runQuiet(command: string, args: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    child.on('error', reject)
    child.on('close', (code) => {
      if (code === 0) resolve()
      else reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr.trim()}`))
    })
  })
}

/** A unique, label-safe name for one run's resources. */
let counter = 0
export function uniqueName(prefix: string): string {
  counter += 1
  return `bench-${prefix}-${process.pid}-${counter}-${Date.now().toString(36)}`
}
