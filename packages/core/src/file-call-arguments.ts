import { z } from 'zod'
import { configIssues } from './config.js'
import { SandboxConfigValidationError } from './errors.js'

/**
 * The arguments of the file calls a host makes (`writeFile`, `writeFiles`,
 * `readFile`, `listFiles`, `writeFileStream`), checked before anything is sent: a
 * number or an object as content was written as an empty file, and an
 * option the backend does not know was ignored. Content is a string or
 * bytes (a Node `Buffer` is a `Uint8Array`), as the reference's
 * `writeFile(path, content: string | Buffer)`; streams go through
 * `writeFileStream`. Unknown option keys are refused, as unknown config keys
 * are.
 */
const signal = z.instanceof(AbortSignal, { error: 'expected an AbortSignal' }).optional()
const byteCount = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER)

// Permission bits only: a set-uid, set-gid or sticky file is not the host's
// to make in a sandbox.
const mode = z
  .number({ error: 'expected permission bits as a number, e.g. 0o644' })
  .int()
  .min(0)
  .max(0o777, { error: 'only permission bits (0o777) are taken; no set-id or sticky bits' })
  .optional()

const fileOptions = z.object({ signal }).strict()
const readFileOptions = z.object({ signal, maxBytes: byteCount.optional() }).strict()
const writeFileOptions = z.object({ signal, mode, size: byteCount.optional() }).strict()

const content = z.union([z.string(), z.instanceof(Uint8Array)], {
  error: 'expected a string, a Buffer or a Uint8Array',
})

// A batch entry is one of two shapes, told apart by `hostPath`, so that each
// is checked against its own keys (a union would report both shapes' issues).
const path = z.string({ error: 'expected the path in the sandbox as a string' })
const contentEntry = z.object({ path, content, mode }).strict()
const hostFileEntry = z
  .object({ path, hostPath: z.string({ error: 'expected the host path as a string' }), mode })
  .strict()
const batchEntry = z.object({}, { error: 'expected an object with path and content or hostPath' })

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

/**
 * Refuses a `writeFiles` batch any of whose entries `writeFile` would refuse
 * (content, mode) or that has an unknown key, and malformed options: the
 * whole batch, before any file of it is written.
 */
export function checkWriteFilesCall(files: unknown, options: unknown): void {
  const entries: Array<[string, z.ZodType, unknown]> = Array.isArray(files)
    ? files.map((entry, index) => [`files.${index}`, entrySchema(entry), entry])
    : [['files', z.array(z.unknown(), { error: 'expected an array of files' }), files]]
  check('writeFiles', [...entries, ['options', fileOptions.optional(), options]])
}

function entrySchema(entry: unknown): z.ZodType {
  if (typeof entry !== 'object' || entry === null) return batchEntry
  return 'hostPath' in entry ? hostFileEntry : contentEntry
}
