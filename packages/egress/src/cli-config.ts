/**
 * The JSON config of the standalone proxy (`cordon-egress`). Everything a
 * JSON file can express of `EgressProxyOptions` (a `resolver` policy cannot:
 * it is a function), plus where to listen and the control endpoint.
 */
import { egressPolicySchema, SandboxConfigValidationError } from '@cordon/core'
import { parseConfig } from '@cordon/core/backend'
import { z } from 'zod'
import { credentialListSchema, egressProxyOptionsSchema } from './options.js'

const port = () => z.number().int().min(0).max(65535)

const clientSchema = z
  .object({
    address: z.string().min(1),
    clientId: z.string().min(1).max(256),
    policy: egressPolicySchema,
    brokeredCredentials: credentialListSchema.optional(),
  })
  .strict()

export const cliConfigSchema = z
  .object({
    listen: z
      .object({ host: z.string().min(1).optional(), port: port().optional() })
      .strict()
      .optional(),
    control: z
      .object({
        host: z.string().min(1).optional(),
        port: port().optional(),
        /** Bearer token every control request except `GET /healthz` must carry. */
        token: z.string().min(32, 'use a token of at least 32 characters'),
      })
      .strict(),
    policy: egressProxyOptionsSchema.shape.policy,
    brokeredCredentials: egressProxyOptionsSchema.shape.brokeredCredentials,
    allowInwardFor: egressProxyOptionsSchema.shape.allowInwardFor,
    allowedPorts: egressProxyOptionsSchema.shape.allowedPorts,
    limits: egressProxyOptionsSchema.shape.limits,
    upstreamTls: egressProxyOptionsSchema.shape.upstreamTls,
    requireClientPolicy: egressProxyOptionsSchema.shape.requireClientPolicy,
    resolverCacheTtlMs: egressProxyOptionsSchema.shape.resolverCacheTtlMs,
    /** Registrations to start with; more arrive over the control endpoint. */
    clients: z.array(clientSchema).optional(),
  })
  .strict()

export type CliConfig = z.output<typeof cliConfigSchema>

/** Environment variable holding the config as inline JSON, when no `--config` file is given. */
export const CONFIG_ENV = 'CORDON_EGRESS_CONFIG'

export function parseCliConfig(json: string, source: string): CliConfig {
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch (error) {
    throw new SandboxConfigValidationError(source, [
      {
        path: '',
        message: `not valid JSON: ${error instanceof Error ? error.message : String(error)}`,
      },
    ])
  }
  return parseConfig(cliConfigSchema, value, source)
}
