import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { testRunId } from '@cordon/test-support'

/**
 * Runs a fixture of `test/fixtures` that plays a host killed at an exact
 * point (it sends itself SIGKILL); resolves with what it printed, and
 * rejects if it ended any other way.
 */
export async function runHostThatDies(
  fixture: string,
  env: Record<string, string> = {},
): Promise<string> {
  const script = fileURLToPath(new URL(`./fixtures/${fixture}`, import.meta.url))
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, CORDON_TEST_RUN_ID: testRunId(), ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  await new Promise<void>((resolve, reject) => {
    child.on('exit', (code, signal) =>
      signal === 'SIGKILL' ? resolve() : reject(new Error(`child exited ${code}: ${output}`)),
    )
  })
  return output
}
