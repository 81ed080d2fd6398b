import { PassThrough } from 'node:stream'
import { docker } from './test-run.js'

/**
 * Runs `cmd` in a container with the engine's own exec, past cordon's agent
 * (as root, to look at the agent; as another user, to act as the
 * sandbox's processes do whether or not a host holds it). Resolves with its
 * exit code and its stdout and stderr together.
 */
export async function engineExec(
  containerName: string,
  cmd: string[],
  options: { readonly user?: string; readonly env?: string[] } = {},
): Promise<{ exitCode: number; output: string }> {
  const exec = await docker.getContainer(containerName).exec({
    Cmd: cmd,
    ...(options.user === undefined ? {} : { User: options.user }),
    ...(options.env === undefined ? {} : { Env: options.env }),
    AttachStdout: true,
    AttachStderr: true,
  })
  const stream = await exec.start({})
  const output = new PassThrough()
  let text = ''
  output.on('data', (chunk: Buffer) => {
    text += chunk.toString()
  })
  docker.modem.demuxStream(stream, output, output)
  await new Promise((resolve) => stream.on('end', resolve))
  const { ExitCode } = await exec.inspect()
  return { exitCode: ExitCode ?? -1, output: text }
}
