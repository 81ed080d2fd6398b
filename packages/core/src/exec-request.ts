import { z } from 'zod'
import { environmentSchema, parseConfig } from './config.js'
import type { SandboxExecOptions, SandboxStartOptions } from './sandbox.js'
import { resolveSandboxPath } from './sandbox-path.js'

const noNul = (what: string) =>
  z.string().refine((value) => !value.includes('\0'), `${what} cannot contain NUL`)

const execRequestSchema = z.object({
  command: z
    .string()
    .min(1, 'command must not be empty')
    .refine((value) => !value.includes('\0'), 'command cannot contain NUL'),
  args: z.array(noNul('arguments')),
  options: z
    .object({
      timeout: z.number().positive().max(2_147_483_647).optional(),
      env: environmentSchema.optional(),
      cwd: noNul('cwd').min(1, 'cwd must not be empty').optional(),
      onOutput: z
        .custom<(chunk: unknown) => void>(
          (value) => typeof value === 'function',
          'onOutput must be a function',
        )
        .optional(),
      onOutputBytes: z
        .custom<(chunk: unknown) => unknown>(
          (value) => typeof value === 'function',
          'onOutputBytes must be a function',
        )
        .optional(),
      signal: z
        .custom<AbortSignal>(
          (value) => value instanceof AbortSignal,
          'signal must be an AbortSignal',
        )
        .optional(),
      stdin: z.union([z.string(), z.instanceof(Uint8Array)]).optional(),
      maxOutputBytes: z.number().int().positive().optional(),
      openStdin: z.boolean().optional(),
    })
    .strict(),
})

/** An exec or start call as a backend sends it on. */
export interface ValidatedExecRequest {
  readonly command: string
  readonly args: string[]
  /** The call's `cwd`, absolute (a relative one resolved against `rootDir`); undefined when it names none. */
  readonly cwd: string | undefined
}

/**
 * Validates an exec or start call before anything is sent to a sandbox. Every
 * problem (an unknown option among them) is reported in one
 * `SandboxConfigValidationError`. A relative `cwd` is resolved against the
 * sandbox's `rootDir`, the reference's workspace root, so `{ cwd: 'build' }`
 * means the same on every backend.
 */
export function validateExecRequest(
  command: unknown,
  args: unknown,
  options: SandboxExecOptions | SandboxStartOptions | undefined,
  rootDir: string,
): ValidatedExecRequest {
  const parsed = parseConfig(
    execRequestSchema,
    { command, args: args ?? [], options: options ?? {} },
    'exec request',
  )
  const cwd = parsed.options.cwd
  return {
    command: parsed.command,
    args: parsed.args,
    cwd: cwd === undefined ? undefined : resolveSandboxPath(rootDir, cwd),
  }
}
