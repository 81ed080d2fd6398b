import { z } from 'zod'
import type { SandboxEnforcedMount } from './enforcement.js'
import { ContainerSandboxLayoutValidationError, type SandboxConfigIssue } from './errors.js'
import { VOLUME_NAME_PATTERN } from './volumes.js'

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
 * letter or digit, at most 64 characters, and never `..` anywhere (the
 * reference refused `foo..bar`, `..foo` and `foo..`; a single dot, as in
 * `pdf-tools.v2`, is fine).
 */
export const SKILL_ID_PATTERN = /^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/**
 * Where a mount's content comes from.
 * - `hostDir`: a directory on the engine's host (bind mount). Writable, it is
 *   capped at `sizeMb` (cordon; the backend's default when absent), counted
 *   over everything in it, what was there before the sandbox included; and
 *   when the sandbox ends, what its user left there is handed to the
 *   directory's owner, or to `handOverTo` (cordon), so that a host user can
 *   manage every output without privileges.
 * - `azureFileShare`: an Azure Files share.
 * - `inImage`: the path already exists in the image; nothing is mounted.
 * - `ephemeral` (cordon): storage the backend creates for this sandbox, capped
 *   at `sizeMb` (default 256), and removes with it.
 * - `volume` (cordon): a named persistent volume made with
 *   `provider.volumes.create()`, which outlives the sandbox. In a writable
 *   role it is mounted read-write, capped at the volume's size and owned by
 *   the sandbox's user, by one sandbox at a time; in a read-only role it is
 *   mounted read-only, by any number at once. A volume that does not exist
 *   is refused at `create()` (`SandboxVolumeError`, `not-found`): nothing
 *   is created implicitly, so a misspelt name cannot become an empty
 *   volume. A backend that declares `volumes: false` refuses the source.
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
  | { readonly type: 'volume'; readonly name: string }

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
  z
    .object({ type: z.literal('volume'), name: z.string() })
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

/** What {@link checkLayout} found: every problem, and the layout when it has none. */
export interface LayoutCheck {
  /** Every problem, each located relative to the layout (`skills.1.id`). */
  readonly problems: readonly SandboxConfigIssue[]
  /** The layout as parsed, when it has no problem. */
  readonly layout: ContainerSandboxLayout | undefined
  /** The layout with every container path filled in, when it has no problem. */
  readonly resolved: ResolvedContainerSandboxLayout | undefined
}

/**
 * Validates a layout and fills in every container path. Every problem is
 * collected and thrown together as one {@link ContainerSandboxLayoutValidationError}
 * (see {@link checkLayout}).
 */
export function resolveLayout(layout: ContainerSandboxLayout): ResolvedContainerSandboxLayout {
  const checked = checkLayout(layout)
  if (!checked.resolved) throw ContainerSandboxLayoutValidationError.fromIssues(checked.problems)
  return checked.resolved
}

/**
 * Finds every problem of a layout in one pass, as the reference did, so a
 * host fixes them all in one round: a missing `outputs`, malformed or
 * unknown fields, each skill id outside {@link SKILL_ID_PATTERN}, each
 * duplicate skill id, relative paths or paths with `..`, and two mounts on
 * one path. A part that is malformed is reported and left out of the checks
 * that need it whole; the others are still checked. Ids and paths are quoted
 * with `JSON.stringify`.
 */
export function checkLayout(input: unknown): LayoutCheck {
  const parsed = containerSandboxLayoutSchema.safeParse(input)
  const problems: SandboxConfigIssue[] = []
  const raw = (typeof input === 'object' && input !== null ? input : {}) as Record<string, unknown>
  if (raw.outputs === undefined) {
    problems.push({
      path: 'outputs',
      message: "missing: a layout needs the writable outputs mount, the sandbox's rootDir",
    })
  }
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      // Said once above, in words a host can act on.
      if (issue.path.length === 1 && issue.path[0] === 'outputs' && raw.outputs === undefined)
        continue
      problems.push({ path: issue.path.join('.'), message: issue.message })
    }
  }
  const usable = parsed.success ? partsOf(parsed.data) : wellFormedParts(raw)
  const resolved: Record<string, unknown> = {}

  for (const [role, defaultPath, readOnly] of ROLES) {
    const mount = usable[role]
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

  const skills = usable.skills ?? []
  // No skills is no skills: an empty list resolves as an absent one.
  if (skills.length > 0) {
    const seen = new Set<string>()
    resolved.skills = skills.map(({ index, skill }) => {
      const at = `skills.${index}`
      if (!SKILL_ID_PATTERN.test(skill.id)) {
        problems.push({
          path: `${at}.id`,
          message: `skill id ${JSON.stringify(skill.id)} must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit, with no ".."`,
        })
      } else if (seen.has(skill.id)) {
        problems.push({
          path: `${at}.id`,
          message: `duplicate skill id ${JSON.stringify(skill.id)}`,
        })
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
  checkVolumesMountedOnce(planLayoutMounts(result), problems)
  if (problems.length > 0 || !parsed.success)
    return { problems, layout: undefined, resolved: undefined }
  return { problems, layout: parsed.data, resolved: result }
}

/** The mounts of a layout by role, and its skills with the index that locates their problems. */
type LayoutParts = {
  -readonly [Role in (typeof ROLES)[number][0]]?: ContainerSandboxLayoutMount
} & {
  skills?: Array<{ readonly index: number; readonly skill: ContainerSandboxSkillMount }>
}

function partsOf(layout: ContainerSandboxLayout): LayoutParts {
  const { skills, ...mounts } = layout
  return { ...mounts, skills: (skills ?? []).map((skill, index) => ({ index, skill })) }
}

/**
 * The parts of a malformed layout that are well formed on their own, so that
 * the checks of the whole layout still run on them.
 */
function wellFormedParts(raw: Record<string, unknown>): LayoutParts {
  const parts: LayoutParts = {}
  for (const [role] of ROLES) {
    const mount = mountSchema.safeParse(raw[role])
    if (mount.success) parts[role] = mount.data
  }
  if (Array.isArray(raw.skills)) {
    const skills: NonNullable<LayoutParts['skills']> = []
    raw.skills.forEach((item: unknown, index: number) => {
      const skill = skillSchema.safeParse(item)
      if (skill.success) skills.push({ index, skill: skill.data })
    })
    parts.skills = skills
  }
  return parts
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
    const name = plan.role === 'skill' ? `skill ${JSON.stringify(plan.skillId)}` : plan.role
    const other = byPath.get(plan.containerPath)
    // Two skills of one id share their default path: the duplicate id is the one reason.
    if (other && plan.role === 'skill' && other === name) continue
    if (other) {
      problems.push({
        path: plan.role === 'skill' ? 'skills' : plan.role,
        message: `${name} and ${other} are both mounted at ${JSON.stringify(plan.containerPath)}`,
      })
    } else {
      byPath.set(plan.containerPath, name)
    }
  }
}

/**
 * A volume appears once in a layout: its single-writer claim and its cap
 * are the sandbox's, and two views of one tree would make the cap count it twice.
 */
function checkVolumesMountedOnce(
  plans: readonly LayoutMountPlan[],
  problems: SandboxConfigIssue[],
): void {
  const seen = new Set<string>()
  for (const plan of plans) {
    if (plan.source.type !== 'volume') continue
    if (seen.has(plan.source.name))
      problems.push({
        path: plan.role === 'skill' ? 'skills' : plan.role,
        message: `volume ${JSON.stringify(plan.source.name)} is mounted more than once`,
      })
    seen.add(plan.source.name)
  }
}

/**
 * Host trees a `hostDir` may neither be, lie under, nor contain, in any role
 * (a read-only view of them leaks as much as a writable one):
 * - `/proc`, `/sys`, `/dev`: the kernel's pseudo-filesystems. Mounted, they
 *   show the host's processes and their command lines, its kernel knobs and
 *   its devices, which is the whole point of the container boundary.
 * - `/run` and `/var/run` (its usual link): the engine's socket, containerd's
 *   and other daemons' sockets live there; a socket is the host.
 * - `/var/lib/docker`, `/var/lib/containerd`: the engine's own state, which
 *   holds every other container's filesystem. An engine configured with
 *   another `data-root` is not known here; the socket check of the backend
 *   and these textual checks are what a layout cannot get around.
 * - `/etc`: host accounts, keys and service configuration; writable, a
 *   sandbox could add a host user or a cron job.
 * - `/boot`: the host's kernel and boot loader.
 * A directory that contains one of them (`/var`, `/`) is refused too.
 */
const REFUSED_HOST_TREES: readonly string[] = [
  '/proc',
  '/sys',
  '/dev',
  '/run',
  '/var/run',
  '/var/lib/docker',
  '/var/lib/containerd',
  '/etc',
  '/boot',
]

/**
 * Container paths a layout may not mount on or under: the kernel's
 * pseudo-filesystems, which the runtime mounts and a mount over would hide
 * or replace, and cordon's own (`/.cordon*`: the agent runtime, the huge
 * page Node, snapshots; `/run/cordon-agent`: the agent's socket), which the
 * sandbox's agent runs from.
 */
const RESERVED_CONTAINER_TREES: readonly string[] = ['/proc', '/dev', '/sys', '/run/cordon-agent']

/** Whether `path` is `tree` or lies under it (both normalized, absolute). */
function isWithin(path: string, tree: string): boolean {
  return path === tree || path.startsWith(`${tree}/`)
}

/**
 * The host tree a host directory is, lies under or contains, if it is one
 * of {@link REFUSED_HOST_TREES}; `path` should be normalized, and resolved
 * through links where the caller can see the host's filesystem.
 */
export function refusedHostTree(path: string): string | undefined {
  const normalized = normalizeAbsolutePath(path)
  return REFUSED_HOST_TREES.find(
    (tree) => isWithin(normalized, tree) || isWithin(tree, normalized) || normalized === '/',
  )
}

function checkContainerPath(path: string, at: string, problems: SandboxConfigIssue[]): string {
  if (path.includes('\0')) {
    problems.push({ path: at, message: `${JSON.stringify(path)} must not contain a NUL character` })
  }
  const normalized = normalizeAbsolutePath(path)
  const reserved = RESERVED_CONTAINER_TREES.find((tree) => isWithin(normalized, tree))
  if (reserved !== undefined || /^\/\.cordon/.test(normalized)) {
    problems.push({
      path: at,
      message: `${JSON.stringify(path)} is reserved: ${reserved ?? '/.cordon*'} belongs to the kernel or to cordon's agent`,
    })
  }
  if (!path.startsWith('/')) {
    problems.push({ path: at, message: `${JSON.stringify(path)} must be an absolute path` })
  }
  if (path.split('/').includes('..')) {
    problems.push({ path: at, message: `${JSON.stringify(path)} must not contain ".."` })
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
  if (source.type === 'volume' && !VOLUME_NAME_PATTERN.test(source.name)) {
    problems.push({
      path: `${at}.name`,
      message: `volume name ${JSON.stringify(source.name)} must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit, with no ".."`,
    })
  }
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
      message: `host directory ${JSON.stringify(source.hostPath)} must be an absolute path`,
    })
  }
  if (source.hostPath.split('/').includes('..')) {
    problems.push({
      path: `${at}.hostPath`,
      message: `host directory ${JSON.stringify(source.hostPath)} must not contain ".."`,
    })
  }
  if (source.hostPath.includes('\0')) {
    problems.push({
      path: `${at}.hostPath`,
      message: `host directory ${JSON.stringify(source.hostPath)} must not contain a NUL character`,
    })
  }
  // Textual: the engine's host may be another machine, so links are not
  // followed here; a backend that sees the host's filesystem resolves them
  // before it mounts (see refusedHostTree).
  const tree = source.hostPath.startsWith('/') ? refusedHostTree(source.hostPath) : undefined
  if (tree !== undefined) {
    problems.push({
      path: `${at}.hostPath`,
      message: `host directory ${JSON.stringify(source.hostPath)} would expose the host's ${tree}; mount a directory made for the sandbox instead`,
    })
  }
}

/** Collapses repeated and trailing slashes and `.` segments of an absolute path. */
export function normalizeAbsolutePath(path: string): string {
  const segments = path.split('/').filter((segment) => segment !== '' && segment !== '.')
  return `/${segments.join('/')}`
}

/**
 * The layout's mounts as a sandbox's enforcement report lists them
 * (`sandbox.enforced.mounts`): path, access and whether programs on it run.
 */
export function enforcedLayoutMounts(
  layout: ResolvedContainerSandboxLayout,
): SandboxEnforcedMount[] {
  return planLayoutMounts(layout).map((mount) => ({
    path: mount.containerPath,
    access: mount.readOnly ? 'read-only' : 'read-write',
    noexec: mount.noexec,
  }))
}
