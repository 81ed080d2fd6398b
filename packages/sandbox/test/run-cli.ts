import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
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
    // A command may end without reading all of its input (EPIPE here is no failure).
    child.stdin?.on('error', () => {})
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

/** `cordon` as a process whose stdout and stderr the test reads (or stops reading) itself. */
export function spawnCordon(args: readonly string[]): ChildProcess & {
  stderrText: () => string
  exited: Promise<number | null>
} {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code) => resolve(code))
  })
  return Object.assign(child, { stderrText: () => stderr, exited })
}

/** What a `cordon` run printed, as the bytes it wrote. */
export interface CliBytesResult {
  readonly code: number | null
  readonly stdout: Buffer
  readonly stderr: Buffer
}

/**
 * Runs the built `cordon` with `args` and collects what it printed as
 * bytes; `stdin` (bytes or text) is written to it and then closed, else
 * its stdin is empty.
 */
export function cordonBytes(
  args: readonly string[],
  stdin?: string | Uint8Array,
): Promise<CliBytesResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    })
    const stdout: Buffer[] = []
    const stderr: Buffer[] = []
    child.stdout!.on('data', (chunk: Buffer) => stdout.push(chunk))
    child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk))
    child.stdin?.on('error', () => {})
    if (stdin !== undefined) child.stdin!.end(stdin)
    child.on('error', reject)
    child.on('close', (code) =>
      resolve({ code, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) }),
    )
  })
}

/**
 * The ids of the sandbox containers on the engine that the cordon process
 * `pid` made (its owner labels name it), running or not.
 */
export function sandboxContainersOf(pid: number): string[] {
  return execFileSync(
    'docker',
    [
      'ps',
      '--all',
      '--quiet',
      '--filter',
      `label=cordon.owner.pid=${pid}`,
      '--filter',
      'label=cordon.role=sandbox',
    ],
    { encoding: 'utf8' },
  )
    .split('\n')
    .filter(Boolean)
}

/** Polls `check` every 100 ms until it returns a value, for up to `ms`. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined,
  ms = 60_000,
): Promise<T> {
  for (let waited = 0; ; waited += 100) {
    const value = check()
    if (value !== undefined) return value
    if (waited >= ms) throw new Error(`waited ${ms} ms for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
