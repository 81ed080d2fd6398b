/**
 * The floor: the shortest dockerode sequence that gives the same sandbox
 * cordon gives (same hardening, same tmpfs workspace volume created first),
 * with nothing on top: no validation, no owner labels, no readiness probe, no
 * event stream, no tree-kill tagging.
 */
import type { Duplex } from 'node:stream'
import type Docker from 'dockerode'
import type { EngineRuntime } from '../bench-runtime.js'
import { BENCH_LABELS, docker, removeContainer, removeVolume, uniqueName } from '../engine.js'
import {
  existingVolumeMount,
  hardenedCreateOptions,
  WORKSPACE_VOLUME_OPTIONS,
} from '../hardened-spec.js'

export interface FloorSandbox {
  readonly container: Docker.Container
  readonly volume: string
}

export async function createFloorSandbox(
  signal?: AbortSignal,
  options: {
    runtime?: EngineRuntime | undefined
    /** Another image than the bench's (one with Node, for programs run inside). */
    image?: string
    /** More tmpfs mounts beside `/tmp`, as `HostConfig.Tmpfs` takes them. */
    tmpfs?: Record<string, string>
  } = {},
): Promise<FloorSandbox> {
  const name = uniqueName('floor')
  const volume = `${name}-outputs`
  await docker.createVolume({
    Name: volume,
    Labels: BENCH_LABELS,
    Driver: 'local',
    DriverOpts: WORKSPACE_VOLUME_OPTIONS,
    abortSignal: signal,
  } as Docker.VolumeCreateOptions)
  const spec = hardenedCreateOptions(name, [existingVolumeMount(volume)], options.runtime)
  const container = await docker.createContainer({
    ...spec,
    ...(options.image ? { Image: options.image } : {}),
    HostConfig: { ...spec.HostConfig, Tmpfs: { ...spec.HostConfig?.Tmpfs, ...options.tmpfs } },
  })
  await container.start()
  return { container, volume }
}

export async function removeFloorSandbox(sandbox: FloorSandbox): Promise<void> {
  await removeContainer(sandbox.container.id)
  await removeVolume(sandbox.volume)
}

/**
 * One exec round trip: create the exec, start it attached, read the
 * multiplexed output to its end, then read the exit code.
 */
export async function bareExec(
  container: Docker.Container,
  cmd: readonly string[],
): Promise<number> {
  const exec = await container.exec({
    Cmd: [...cmd],
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  })
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex
  await new Promise<void>((resolve, reject) => {
    stream.on('end', resolve)
    stream.on('close', resolve)
    stream.on('error', reject)
    stream.resume()
  })
  const info = await exec.inspect()
  return info.ExitCode ?? -1
}
