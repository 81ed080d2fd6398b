import { z } from 'zod'
import { type SandboxConfigIssue, SandboxLayoutValidationError } from './errors.js'

/** Default container paths, the same as the reference's so hosts can switch. */
export const SANDBOX_DEFAULT_OUTPUTS_PATH = '/mnt/user-data/outputs'
export const SANDBOX_DEFAULT_UPLOADS_PATH = '/mnt/user-data/uploads'
export const SANDBOX_DEFAULT_TOOL_RESULTS_PATH = '/mnt/user-data/tool_results'
export const SANDBOX_DEFAULT_TRANSCRIPTS_PATH = '/mnt/transcripts'
export const SANDBOX_DEFAULT_SCRATCH_PATH = '/mnt/scratch'
export const SANDBOX_DEFAULT_SKILLS_PARENT = '/mnt/skills'

/** Skill ids become path segments, so they are restricted to a safe alphabet. */
export const SKILL_ID_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/

/**
 * Where a mount's content comes from.
 * - `hostDir`: a directory on the engine's host (bind mount).
 * - `ephemeral`: storage the backend creates for this sandbox and removes with it.
 * - `inImage`: the path already exists in the image; nothing is mounted.
 * - `azureFileShare`: an Azure Files share (ACI).
 */
export const containerSandboxMountSourceSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('hostDir'), path: z.string() }).readonly(),
  z
    .object({ kind: z.literal('ephemeral'), sizeMb: z.number().int().positive().optional() })
    .readonly(),
  z.object({ kind: z.literal('inImage') }).readonly(),
  z
    .object({
      kind: z.literal('azureFileShare'),
      storageAccountName: z.string().min(1),
      shareName: z.string().min(1),
      storageAccountKey: z.string().min(1).optional(),
    })
    .readonly(),
])
export type ContainerSandboxMountSource = z.input<typeof containerSandboxMountSourceSchema>

export const containerSandboxLayoutMountSchema = z
  .object({
    source: containerSandboxMountSourceSchema,
    /** Path inside the sandbox; defaults to the role's default path. */
    path: z.string().optional(),
  })
  .readonly()
export type ContainerSandboxLayoutMount = z.input<typeof containerSandboxLayoutMountSchema>

export const containerSandboxSkillMountSchema = z
  .object({ id: z.string(), source: containerSandboxMountSourceSchema })
  .readonly()
export type ContainerSandboxSkillMount = z.input<typeof containerSandboxSkillMountSchema>

/**
 * What a container sandbox sees on disk. `outputs` is required and writable and
 * is the sandbox's `rootDir`; uploads, tool results and transcripts are mounted
 * read-only; scratch is writable; each skill is mounted read-only at
 * `/mnt/skills/<id>`.
 */
export const containerSandboxLayoutSchema = z
  .object({
    outputs: containerSandboxLayoutMountSchema,
    uploads: containerSandboxLayoutMountSchema.optional(),
    toolResults: containerSandboxLayoutMountSchema.optional(),
    transcripts: containerSandboxLayoutMountSchema.optional(),
    scratch: containerSandboxLayoutMountSchema.optional(),
    skills: z.array(containerSandboxSkillMountSchema).readonly().optional(),
  })
  .readonly()
export type ContainerSandboxLayout = z.input<typeof containerSandboxLayoutSchema>

export type ContainerSandboxMountRole =
  | 'outputs'
  | 'uploads'
  | 'toolResults'
  | 'transcripts'
  | 'scratch'
  | 'skill'

export interface ResolvedContainerSandboxMount {
  readonly role: ContainerSandboxMountRole
  /** Set for `role: 'skill'`. */
  readonly skillId?: string
  /** Absolute, normalized path inside the sandbox. */
  readonly containerPath: string
  readonly readOnly: boolean
  readonly source: ContainerSandboxMountSource
}

export interface ResolvedContainerSandboxLayout {
  /** The outputs path: the sandbox's `rootDir` and the default working directory. */
  readonly outputsPath: string
  readonly mounts: readonly ResolvedContainerSandboxMount[]
  /** Container paths the host may write through the file API. */
  readonly writableRoots: readonly string[]
  /** Container paths the host may read through the file API (includes the writable ones). */
  readonly readableRoots: readonly string[]
}

const ROLE_DEFAULTS: ReadonlyArray<
  readonly [Exclude<ContainerSandboxMountRole, 'skill'>, string, boolean]
> = [
  ['outputs', SANDBOX_DEFAULT_OUTPUTS_PATH, false],
  ['uploads', SANDBOX_DEFAULT_UPLOADS_PATH, true],
  ['toolResults', SANDBOX_DEFAULT_TOOL_RESULTS_PATH, true],
  ['transcripts', SANDBOX_DEFAULT_TRANSCRIPTS_PATH, true],
  ['scratch', SANDBOX_DEFAULT_SCRATCH_PATH, false],
]

/**
 * Validates a layout and resolves it to concrete mounts. Every problem is
 * collected and thrown together as one {@link SandboxLayoutValidationError}:
 * malformed fields, skill ids outside {@link SKILL_ID_PATTERN}, paths that are
 * relative or contain `..`, duplicate skill ids, and two mounts on one path.
 */
export function resolveLayout(layout: ContainerSandboxLayout): ResolvedContainerSandboxLayout {
  const parsed = containerSandboxLayoutSchema.safeParse(layout)
  if (!parsed.success) {
    throw new SandboxLayoutValidationError(
      parsed.error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message })),
    )
  }
  const input = parsed.data
  const problems: SandboxConfigIssue[] = []
  const mounts: ResolvedContainerSandboxMount[] = []

  for (const [role, defaultPath, readOnly] of ROLE_DEFAULTS) {
    const mount = input[role]
    if (!mount) continue
    const containerPath = checkContainerPath(mount.path ?? defaultPath, `${role}.path`, problems)
    checkSource(mount.source, `${role}.source`, problems)
    mounts.push({ role, containerPath, readOnly, source: mount.source })
  }

  const seenSkillIds = new Set<string>()
  input.skills?.forEach((skill, index) => {
    const at = `skills.${index}`
    if (!SKILL_ID_PATTERN.test(skill.id)) {
      problems.push({
        path: `${at}.id`,
        message: `skill id "${skill.id}" must match ${SKILL_ID_PATTERN} (lowercase letters, digits, "-" and "_", at most 64)`,
      })
    } else if (seenSkillIds.has(skill.id)) {
      problems.push({ path: `${at}.id`, message: `duplicate skill id "${skill.id}"` })
    }
    seenSkillIds.add(skill.id)
    checkSource(skill.source, `${at}.source`, problems)
    mounts.push({
      role: 'skill',
      skillId: skill.id,
      containerPath: `${SANDBOX_DEFAULT_SKILLS_PARENT}/${skill.id}`,
      readOnly: true,
      source: skill.source,
    })
  })

  const byPath = new Map<string, string>()
  for (const mount of mounts) {
    const name = mount.role === 'skill' ? `skill "${mount.skillId}"` : mount.role
    const other = byPath.get(mount.containerPath)
    if (other) {
      problems.push({
        path: mount.role === 'skill' ? 'skills' : mount.role,
        message: `${name} and ${other} are both mounted at ${mount.containerPath}`,
      })
    } else {
      byPath.set(mount.containerPath, name)
    }
  }

  if (problems.length > 0) throw new SandboxLayoutValidationError(problems)

  const outputsPath = mounts.find((mount) => mount.role === 'outputs')!.containerPath
  const writableRoots = mounts
    .filter((mount) => !mount.readOnly)
    .map((mount) => mount.containerPath)
  return {
    outputsPath,
    mounts,
    writableRoots,
    readableRoots: mounts.map((mount) => mount.containerPath),
  }
}

function checkContainerPath(path: string, at: string, problems: SandboxConfigIssue[]): string {
  if (!path.startsWith('/')) {
    problems.push({ path: at, message: `"${path}" must be an absolute path` })
  }
  if (path.split('/').includes('..')) {
    problems.push({ path: at, message: `"${path}" must not contain ".."` })
  }
  if (path.split('/').filter(Boolean).length === 0) {
    problems.push({ path: at, message: 'a mount cannot cover the root directory' })
  }
  return normalizeAbsolutePath(path)
}

function checkSource(
  source: ContainerSandboxMountSource,
  at: string,
  problems: SandboxConfigIssue[],
): void {
  if (source.kind !== 'hostDir') return
  if (!source.path.startsWith('/')) {
    problems.push({
      path: `${at}.path`,
      message: `host directory "${source.path}" must be an absolute path`,
    })
  }
  if (source.path.split('/').includes('..')) {
    problems.push({
      path: `${at}.path`,
      message: `host directory "${source.path}" must not contain ".."`,
    })
  }
}

/** Collapses repeated and trailing slashes and `.` segments of an absolute path. */
export function normalizeAbsolutePath(path: string): string {
  const segments = path.split('/').filter((segment) => segment !== '' && segment !== '.')
  return `/${segments.join('/')}`
}
