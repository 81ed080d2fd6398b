import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const run = promisify(execFile)
const creator = fileURLToPath(new URL('./fixtures/detached-creator.mjs', import.meta.url))

/** Runs the creator fixture in its own Node process; resolves with the sandbox id it printed. */
export async function createInChildProcess(
  runtime: string,
  env: Record<string, string>,
): Promise<{ id: string; exitedWith: number | string }> {
  const child = run(process.execPath, [creator], {
    env: { ...process.env, CORDON_TEST_RUNTIME: runtime, ...env },
    timeout: 120_000,
  })
  const outcome = await child.then(
    ({ stdout }) => ({ stdout, exitedWith: 0 as number | string }),
    (error: { stdout?: string; signal?: string; code?: number }) => ({
      stdout: error.stdout ?? '',
      exitedWith: error.signal ?? error.code ?? 'unknown',
    }),
  )
  const id = /sandbox (sbx_\w+)/.exec(outcome.stdout)?.[1]
  if (!id) throw new Error(`the creator printed no sandbox id: ${JSON.stringify(outcome)}`)
  return { id, exitedWith: outcome.exitedWith }
}
