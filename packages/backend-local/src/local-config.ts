import { isAbsolute } from 'node:path'
import { durationMsSchema } from '@cordon/core/backend'
import { z } from 'zod'

/**
 * The `process:local` backend: cordon's agent as a child process of the host,
 * in a temporary workspace directory, with no isolation at all. For trusted
 * development and for a host's own tests on machines without Docker.
 */
export interface LocalBackendConfig {
  readonly tier: 'process'
  readonly runtime: 'local'
  /**
   * The directory each sandbox's temporary workspace is made in (absolute;
   * default: the operating system's temporary directory). Workspaces left
   * here by a host that died are removed on the next `create()`.
   */
  readonly workspaceParent?: string
  /** Budget of `create()`, in ms: the agent started and answering (default 30 000). */
  readonly readyTimeoutMs?: number
  /** The `node` binary that runs the agent (default: the host's own, `process.execPath`). */
  readonly nodePath?: string
}

const absolutePath = (field: string) =>
  z.string().refine(isAbsolute, { message: `${field} must be an absolute path` })

/** Validates a {@link LocalBackendConfig}; every problem at once, unknown keys refused. */
export const localBackendConfigSchema: z.ZodType<LocalBackendConfig> = z
  .object({
    tier: z.literal('process'),
    runtime: z.literal('local'),
    workspaceParent: absolutePath('workspaceParent').optional(),
    readyTimeoutMs: durationMsSchema().optional(),
    nodePath: absolutePath('nodePath').optional(),
  })
  .strict()
  .readonly()
