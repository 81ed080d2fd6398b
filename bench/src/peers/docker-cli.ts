/** The `docker` command-line client, as a shell script or a host that shells out would use it. */
import type { EngineRuntime } from '../bench-runtime.js'
import { run } from '../engine.js'
import { dockerRunArgs } from '../hardened-spec.js'

export const DOCKER_CLI = process.env.CORDON_BENCH_DOCKER_CLI ?? 'docker'

/** `docker run -d` of the hardened container (`--runtime` when one is given); returns its id. */
export async function cliRun(name: string, runtime?: EngineRuntime): Promise<string> {
  return (await run(DOCKER_CLI, dockerRunArgs(name, `${name}-outputs`, runtime))).trim()
}

export async function cliExec(container: string, cmd: readonly string[]): Promise<void> {
  await run(DOCKER_CLI, ['exec', container, ...cmd])
}
