import { durationMsSchema, functionSchema, tcpPortSchema } from '@cordon/core/backend'
import { z } from 'zod'

/** `container` tier claimed from an Azure Container Instances standby pool (the reference's fields first). */
export interface ACIStandbyPoolBackendConfig {
  readonly tier: 'container'
  readonly runtime: 'aci-standby-pool'
  readonly subscriptionId: string
  readonly resourceGroup: string
  readonly location: string
  readonly standbyPoolResourceId: string
  readonly containerGroupProfileResourceId: string
  readonly containerGroupProfileRevision?: number
  /** Returns a bearer token for Azure Resource Manager; called before every request. */
  readonly getArmToken: () => Promise<string>
  /** Delegated subnet the claimed groups join; required unless `allowPublicAddress` is set. */
  readonly subnetId?: string
  /** Delay between the agent health probes while a claim comes up (default 500 ms). */
  readonly readyPollIntervalMs?: number
  /** Budget for a claim to become exec-ready (default 60 s). */
  readonly readyTimeoutMs?: number
  /** Port the cordon agent in each group listens on (default 2024). */
  readonly workerPort?: number
  readonly armApiVersion?: string
  /** Prefix of the claimed group names (default `cordon`). */
  readonly containerNamePrefix?: string
  /** Opt in to a public IP for claimed groups when no subnet is given. */
  readonly allowPublicAddress?: boolean
  /** Azure Resource Manager's base URL (default the public cloud's). */
  readonly armEndpoint?: string
}

const azureResourceId = () => z.string().startsWith('/subscriptions/')

export const aciStandbyPoolBackendConfigSchema: z.ZodType<ACIStandbyPoolBackendConfig> = z
  .object({
    tier: z.literal('container'),
    runtime: z.literal('aci-standby-pool'),
    subscriptionId: z.string().min(1),
    resourceGroup: z.string().min(1),
    location: z.string().min(1),
    standbyPoolResourceId: azureResourceId(),
    containerGroupProfileResourceId: azureResourceId(),
    containerGroupProfileRevision: z.number().int().nonnegative().optional(),
    getArmToken: functionSchema<() => Promise<string>>(
      'getArmToken must be a function returning a token',
    ),
    subnetId: azureResourceId().optional(),
    readyPollIntervalMs: durationMsSchema().optional(),
    readyTimeoutMs: durationMsSchema().optional(),
    workerPort: tcpPortSchema().optional(),
    armApiVersion: z.string().min(1).optional(),
    containerNamePrefix: z
      .string()
      .regex(/^[a-z0-9-]{1,40}$/, 'lowercase letters, digits and "-", at most 40')
      .optional(),
    allowPublicAddress: z.boolean().optional(),
    armEndpoint: z.string().url().optional(),
  })
  .strict()
  .readonly()
  .superRefine((config, ctx) => {
    if (!config.subnetId && config.allowPublicAddress !== true) {
      ctx.addIssue({
        code: 'custom',
        path: ['subnetId'],
        message:
          'give a subnetId, or set allowPublicAddress: true to accept a public IP for each claimed group',
      })
    }
  })
