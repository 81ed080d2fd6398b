import { z } from 'zod'
import { configIssues } from './config.js'
import { SandboxConfigValidationError } from './errors.js'

/**
 * The arguments of the file calls a host makes (`writeFile`, `readFile`,
 * `listFiles`, `writeFileStream`), checked before anything is sent: a
 * number or an object as content was written as an empty file, and an
 * option the backend does not know was ignored. Content is a string or
 * bytes (a Node `Buffer` is a `Uint8Array`), as the reference's
 * `writeFile(path, content: string | Buffer)`; streams go through
 * `writeFileStream`. Unknown option keys are refused, as unknown config keys
 * are.
 */
const signal = z.instanceof(AbortSignal, { error: 'expected an AbortSignal' }).optional()
const byteCount = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER)

const fileOptions = z.object({ signal }).strict()
const readFileOptions = z.object({ signal, maxBytes: byteCount.optional() }).strict()
const writeFileOptions = z
  .object({
    signal,
    // Permission bits only: a set-uid, set-gid or sticky file is not the
    // host's to make in a sandbox.
    mode: z
      .number({ error: 'expected permission bits as a number, e.g. 0o644' })
      .int()
      .min(0)
      .max(0o777, { error: 'only permission bits (0o777) are taken; no set-id or sticky bits' })
      .optional(),
    size: byteCount.optional(),
  })
  .strict()

const content = z.union([z.string(), z.instanceof(Uint8Array)], {
  error: 'expected a string, a Buffer or a Uint8Array',
})

function check(call: string, parts: Array<[string, z.ZodType, unknown]>): void {
  const issues = parts.flatMap(([at, schema, value]) => {
    const result = schema.safeParse(value)
    if (result.success) return []
    return configIssues(result.error).map((issue) => ({
      path: issue.path ? `${at}.${issue.path}` : at,
      message: issue.message,
    }))
  })
  if (issues.length > 0) throw new SandboxConfigValidationError(`${call} arguments`, issues)
}

/** Refuses `writeFile` content that is not text or bytes, and malformed options. */
export function checkWriteFileCall(value: unknown, options: unknown): void {
  check('writeFile', [
    ['content', content, value],
    ['options', writeFileOptions.optional(), options],
  ])
}

/** Refuses malformed `writeFileStream` options. */
export function checkWriteFileStreamOptions(options: unknown): void {
  check('writeFileStream', [['options', writeFileOptions.optional(), options]])
}

/** Refuses malformed `readFile` options. */
export function checkReadFileOptions(options: unknown): void {
  check('readFile', [['options', readFileOptions.optional(), options]])
}

/** Refuses malformed `listFiles` options. */
export function checkListFilesOptions(options: unknown): void {
  check('listFiles', [['options', fileOptions.optional(), options]])
}
