import { z } from 'zod'
import { environmentSchema, parseConfig } from './config.js'
import type { SandboxExecOptions, SandboxStartOptions } from './sandbox.js'

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
      cwd: noNul('cwd').startsWith('/', 'cwd must be an absolute path').optional(),
      onOutput: z
        .custom<(chunk: unknown) => void>(
          (value) => typeof value === 'function',
          'onOutput must be a function',
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

/**
 * Validates an exec or start call before anything is sent to a sandbox. Every
 * problem (an unknown option among them) is reported in one
 * `SandboxConfigValidationError`.
 */
export function validateExecRequest(
  command: unknown,
  args: unknown,
  options: SandboxExecOptions | SandboxStartOptions | undefined,
): { command: string; args: string[] } {
  const parsed = parseConfig(
    execRequestSchema,
    { command, args: args ?? [], options: options ?? {} },
    'exec request',
  )
  return { command: parsed.command, args: parsed.args }
}
