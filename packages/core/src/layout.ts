import { z } from 'zod'
import { ContainerSandboxLayoutValidationError, type SandboxConfigIssue } from './errors.js'

/** Default container paths, the reference's, so hosts and their prompts keep them. */
export const SANDBOX_DEFAULT_OUTPUTS_PATH = '/mnt/user-data/outputs'
export const SANDBOX_DEFAULT_UPLOADS_PATH = '/mnt/user-data/uploads'
export const SANDBOX_DEFAULT_SCRATCH_PATH = '/mnt/user-data/scratch'
export const SANDBOX_DEFAULT_TOOL_RESULTS_PATH = '/mnt/user-data/tool_results'
export const SANDBOX_DEFAULT_TRANSCRIPTS_PATH = '/mnt/transcripts'
export const SANDBOX_DEFAULT_SKILLS_PARENT = '/mnt/skills'

/**
 * Skill ids become a path segment under `/mnt/skills` unless the skill names
 * its own `containerPath`: letters, digits, `.`, `_` and `-`, starting with a
 * letter or digit (so never `.` or `..`), at most 64 characters.
 */
export const SKILL_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/**
 * Where a mount's content comes from.
 * - `hostDir`: a directory on the engine's host (bind mount). Writable, it is
 *   capped at `sizeMb` (cordon; the backend's default when absent), counted
 *   over everything in it, what was there before the sandbox included; and
 *   when the sandbox ends, what its user left there is handed to the
 *   directory's owner, or to `handOverTo` (cordon), so that a host user can
 *   manage every output without privileges.
 * - `azureFileShare`: an Azure Files share (ACI).
 * - `inImage`: the path already exists in the image; nothing is mounted.
 * - `ephemeral` (cordon): storage the backend creates for this sandbox, capped
 *   at `sizeMb` (default 256), and removes with it.
 */
export type ContainerSandboxMountSource =
  | {
      readonly type: 'hostDir'
      readonly hostPath: string
      readonly sizeMb?: number
      readonly handOverTo?: { readonly uid: number; readonly gid: number }
    }
  | {
      readonly type: 'azureFileShare'
      readonly storageAccountName: string
      readonly shareName: string
      readonly storageAccountKey: string
    }
  | { readonly type: 'inImage' }
  | { readonly type: 'ephemeral'; readonly sizeMb?: number }

/** One mount of a layout: where its content comes from and where it appears (default: the role's path). */
export interface ContainerSandboxLayoutMount {
  readonly source: ContainerSandboxMountSource
  readonly containerPath?: string
  /**
   * Whether programs on this mount may not be run (cordon; default false).
   * By default they may: an agent builds and downloads tools and runs them,
   * and a sandbox's boundary is its container, not a mount flag (an
   * interpreter still reads a script from a `noexec` mount). With `true`
   * the mount is `noexec`, so running a file from it fails with EACCES
   * (status 126 from a shell). A backend that cannot mount this source
   * `noexec` refuses it with `SandboxControlRefusedError` naming
   * `layout.<role>.noexec`.
   */
  readonly noexec?: boolean
}

/** A read-only skill bundle, mounted at `/mnt/skills/<id>` unless `containerPath` says otherwise. */
export interface ContainerSandboxSkillMount {
  readonly id: string
  readonly source: ContainerSandboxMountSource
  readonly containerPath?: string
  /** As a layout mount's {@link ContainerSandboxLayoutMount.noexec}. */
  readonly noexec?: boolean
}

/**
 * What a container sandbox sees on disk. `outputs` is required and writable
 * and is the sandbox's `rootDir`; uploads, tool results and transcripts are
 * read-only; scratch is writable; each skill is read-only.
 */
export interface ContainerSandboxLayout {
  readonly outputs: ContainerSandboxLayoutMount
  readonly uploads?: ContainerSandboxLayoutMount
  readonly scratch?: ContainerSandboxLayoutMount
  readonly toolResults?: ContainerSandboxLayoutMount
  readonly skills?: readonly ContainerSandboxSkillMount[]
  readonly transcripts?: ContainerSandboxLayoutMount
}

/** A mount with its container path filled in. */
export interface ResolvedContainerSandboxMount {
  readonly source: ContainerSandboxMountSource
  readonly containerPath: string
  /** Present only where the layout set it ({@link ContainerSandboxLayoutMount.noexec}). */
  readonly noexec?: boolean
}

/**
 * A layout with every container path filled in (normalized, absolute): what
 * the model will see, for prompt generators and backends.
 */
export interface ResolvedContainerSandboxLayout {
  readonly outputs: ResolvedContainerSandboxMount
  readonly uploads?: ResolvedContainerSandboxMount
  readonly scratch?: ResolvedContainerSandboxMount
  readonly toolResults?: ResolvedContainerSandboxMount
  readonly skills?: readonly (ResolvedContainerSandboxMount & { readonly id: string })[]
  readonly transcripts?: ResolvedContainerSandboxMount
}

const mountSourceSchema = z.discriminatedUnion('type', [
  z
    .object({
      type: z.literal('hostDir'),
      hostPath: z.string(),
      sizeMb: z.number().int().positive().max(1_048_576).optional(),
      handOverTo: z
        .object({
          uid: z.number().int().min(0).max(0xfffffffe),
          gid: z.number().int().min(0).max(0xfffffffe),
        })
        .strict()
        .readonly()
        .optional(),
    })
    .strict()
    .readonly(),
  z
    .object({
      type: z.literal('azureFileShare'),
      storageAccountName: z.string().min(1),
      shareName: z.string().min(1),
      storageAccountKey: z.string().min(1),
    })
    .strict()
    .readonly(),
  z
    .object({ type: z.literal('inImage') })
    .strict()
    .readonly(),
  z
    .object({
      type: z.literal('ephemeral'),
      sizeMb: z.number().int().positive().max(1_048_576).optional(),
      handOverTo: z
        .object({
          uid: z.number().int().min(0).max(0xfffffffe),
          gid: z.number().int().min(0).max(0xfffffffe),
        })
        .strict()
        .readonly()
        .optional(),
    })
    .strict()
    .readonly(),
])

const mountSchema = z
  .object({
    source: mountSourceSchema,
    containerPath: z.string().optional(),
    noexec: z.boolean().optional(),
  })
  .strict()
  .readonly()

const skillSchema = z
  .object({
    id: z.string(),
    source: mountSourceSchema,
    containerPath: z.string().optional(),
    noexec: z.boolean().optional(),
  })
  .strict()
  .readonly()

/** Validates a {@link ContainerSandboxLayout}'s fields; unknown keys are refused. */
export const containerSandboxLayoutSchema: z.ZodType<ContainerSandboxLayout> = z
  .object({
    outputs: mountSchema,
    uploads: mountSchema.optional(),
    scratch: mountSchema.optional(),
    toolResults: mountSchema.optional(),
    skills: z.array(skillSchema).readonly().optional(),
    transcripts: mountSchema.optional(),
  })
  .strict()
  .readonly()

/** The part a mount plays; decides whether it is writable. */
export type ContainerSandboxMountRole =
  | 'outputs'
  | 'uploads'
  | 'scratch'
  | 'toolResults'
  | 'transcripts'
  | 'skill'

/** One mount of a resolved layout, flattened, as backends mount it. */
export interface LayoutMountPlan {
  readonly role: ContainerSandboxMountRole
  /** Set for `role: 'skill'`. */
  readonly skillId?: string
  readonly containerPath: string
  readonly readOnly: boolean
  readonly source: ContainerSandboxMountSource
  /** Programs on it may not be run ({@link ContainerSandboxLayoutMount.noexec}). */
  readonly noexec: boolean
}

const ROLES: ReadonlyArray<
  readonly [Exclude<ContainerSandboxMountRole, 'skill'>, string, boolean]
> = [
  ['outputs', SANDBOX_DEFAULT_OUTPUTS_PATH, false],
  ['uploads', SANDBOX_DEFAULT_UPLOADS_PATH, true],
  ['scratch', SANDBOX_DEFAULT_SCRATCH_PATH, false],
  ['toolResults', SANDBOX_DEFAULT_TOOL_RESULTS_PATH, true],
  ['transcripts', SANDBOX_DEFAULT_TRANSCRIPTS_PATH, true],
]

/**
 * Validates a layout and fills in every container path. Every problem is
 * collected and thrown together as one {@link ContainerSandboxLayoutValidationError}:
 * malformed or unknown fields, skill ids outside {@link SKILL_ID_PATTERN},
 * relative paths or paths with `..`, duplicate skill ids, and two mounts on
 * one path.
 */
export function resolveLayout(layout: ContainerSandboxLayout): ResolvedContainerSandboxLayout {
  const parsed = containerSandboxLayoutSchema.safeParse(layout)
  if (!parsed.success) {
    throw ContainerSandboxLayoutValidationError.fromIssues(
      parsed.error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message })),
    )
  }
  const input = parsed.data
  const problems: SandboxConfigIssue[] = []
  const resolved: Record<string, unknown> = {}

  for (const [role, defaultPath, readOnly] of ROLES) {
    const mount = input[role]
    if (!mount) continue
    checkSource(mount.source, `${role}.source`, readOnly, problems)
    resolved[role] = {
      source: mount.source,
      containerPath: checkContainerPath(
        mount.containerPath ?? defaultPath,
        `${role}.containerPath`,
        problems,
      ),
      ...(mount.noexec === undefined ? {} : { noexec: mount.noexec }),
    }
  }

  if (input.skills) {
    const seen = new Set<string>()
    resolved.skills = input.skills.map((skill, index) => {
      const at = `skills.${index}`
      if (!SKILL_ID_PATTERN.test(skill.id)) {
        problems.push({
          path: `${at}.id`,
          message: `skill id "${skill.id}" must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit`,
        })
      } else if (seen.has(skill.id)) {
        problems.push({ path: `${at}.id`, message: `duplicate skill id "${skill.id}"` })
      }
      seen.add(skill.id)
      checkSource(skill.source, `${at}.source`, true, problems)
      return {
        id: skill.id,
        source: skill.source,
        containerPath: checkContainerPath(
          skill.containerPath ?? `${SANDBOX_DEFAULT_SKILLS_PARENT}/${skill.id}`,
          `${at}.containerPath`,
          problems,
        ),
        ...(skill.noexec === undefined ? {} : { noexec: skill.noexec }),
      }
    })
  }

  const result = resolved as unknown as ResolvedContainerSandboxLayout
  checkOverlaps(planLayoutMounts(result), problems)
  if (problems.length > 0) throw ContainerSandboxLayoutValidationError.fromIssues(problems)
  return result
}

/** The mounts of a resolved layout, flattened, with whether each is writable. */
export function planLayoutMounts(layout: ResolvedContainerSandboxLayout): LayoutMountPlan[] {
  const plans: LayoutMountPlan[] = []
  for (const [role, , readOnly] of ROLES) {
    const mount = layout[role]
    if (mount)
      plans.push({
        role,
        containerPath: mount.containerPath,
        readOnly,
        source: mount.source,
        noexec: mount.noexec === true,
      })
  }
  for (const skill of layout.skills ?? []) {
    plans.push({
      role: 'skill',
      skillId: skill.id,
      containerPath: skill.containerPath,
      readOnly: true,
      source: skill.source,
      noexec: skill.noexec === true,
    })
  }
  return plans
}

/** Container paths the host may write through the file API. */
export function writableRoots(layout: ResolvedContainerSandboxLayout): string[] {
  return planLayoutMounts(layout)
    .filter((mount) => !mount.readOnly)
    .map((mount) => mount.containerPath)
}

/** Container paths the host may read through the file API (the writable ones included). */
export function readableRoots(layout: ResolvedContainerSandboxLayout): string[] {
  return planLayoutMounts(layout).map((mount) => mount.containerPath)
}

function checkOverlaps(plans: readonly LayoutMountPlan[], problems: SandboxConfigIssue[]): void {
  const byPath = new Map<string, string>()
  for (const plan of plans) {
    const name = plan.role === 'skill' ? `skill "${plan.skillId}"` : plan.role
    const other = byPath.get(plan.containerPath)
    if (other) {
      problems.push({
        path: plan.role === 'skill' ? 'skills' : plan.role,
        message: `${name} and ${other} are both mounted at ${plan.containerPath}`,
      })
    } else {
      byPath.set(plan.containerPath, name)
    }
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
  readOnly: boolean,
  problems: SandboxConfigIssue[],
): void {
  if (source.type !== 'hostDir') return
  if (readOnly && source.sizeMb !== undefined) {
    // A cap on what the sandbox writes means nothing on a mount it cannot write;
    // refused so that a host does not believe a read-only directory is bounded.
    problems.push({
      path: `${at}.sizeMb`,
      message: 'sizeMb caps what a sandbox writes; this mount is read-only',
    })
  }
  if (readOnly && source.handOverTo !== undefined) {
    problems.push({
      path: `${at}.handOverTo`,
      message: 'handOverTo names who gets what a sandbox writes; this mount is read-only',
    })
  }
  if (!source.hostPath.startsWith('/')) {
    problems.push({
      path: `${at}.hostPath`,
      message: `host directory "${source.hostPath}" must be an absolute path`,
    })
  }
  if (source.hostPath.split('/').includes('..')) {
    problems.push({
      path: `${at}.hostPath`,
      message: `host directory "${source.hostPath}" must not contain ".."`,
    })
  }
}

/** Collapses repeated and trailing slashes and `.` segments of an absolute path. */
export function normalizeAbsolutePath(path: string): string {
  const segments = path.split('/').filter((segment) => segment !== '' && segment !== '.')
  return `/${segments.join('/')}`
}
