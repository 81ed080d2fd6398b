import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

/** The built `cordon` command, as a user runs it. */
export const CLI = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url))

export interface CliResult {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs `argv` as a process and collects what it printed. `stdin` is written
 * to its stdin and then closed; without it stdin is empty. `env` is added to
 * this process's environment.
 */
export function run(
  argv: readonly string[],
  options: { env?: Record<string, string>; stdin?: string; cwd?: string } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      env: { ...process.env, ...options.env },
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      stdio: [options.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
    })
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    if (options.stdin !== undefined) child.stdin!.end(options.stdin)
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** Runs the built `cordon` with `args`. */
export function cordon(
  args: readonly string[],
  env: Record<string, string> = {},
  stdin?: string,
  cwd?: string,
): Promise<CliResult> {
  return run([process.execPath, CLI, ...args], {
    env,
    ...(stdin === undefined ? {} : { stdin }),
    ...(cwd === undefined ? {} : { cwd }),
  })
}
