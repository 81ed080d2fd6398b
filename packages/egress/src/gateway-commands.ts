import { brokeredCredentialSchema, egressPolicySchema } from '@cordon/core'
import { z } from 'zod'

/**
 * The gateway's control protocol: one JSON object per line on its stdin, one
 * acknowledgement per command on its stdout (between decision events). Over a
 * container's attached stdio this needs no network path between host and
 * gateway, so it works the same with a remote engine and cannot be reached
 * from a sandbox.
 */
const policySchema = egressPolicySchema.refine((policy) => policy.kind !== 'resolver', {
  message: 'the gateway takes resolved lists; the host calls the resolver and sends "static"',
})

export const gatewayCommandSchema = z.discriminatedUnion('op', [
  z.object({
    id: z.string(),
    op: z.literal('add'),
    clientId: z.string().regex(/^[a-z0-9_]{1,64}$/),
    /** Name of the client's socket in `socketDir` (default: the client id). */
    socketName: z
      .string()
      .regex(/^[a-z0-9_-]{1,64}$/)
      .optional(),
    policy: policySchema,
    brokeredCredentials: z.array(brokeredCredentialSchema).optional(),
  }),
  z.object({ id: z.string(), op: z.literal('set'), clientId: z.string(), policy: policySchema }),
  z.object({ id: z.string(), op: z.literal('remove'), clientId: z.string() }),
])
export type GatewayCommand = z.infer<typeof gatewayCommandSchema>

export interface GatewayAck {
  readonly type: 'ack'
  readonly id: string
  readonly ok: boolean
  /** For `add`: the unix socket the client's relay connects to. */
  readonly socketPath?: string
  readonly error?: string
}

/** Gateway settings, passed as JSON in `CORDON_EGRESS_GATEWAY`. */
export const gatewaySettingsSchema = z.object({
  socketDir: z.string().startsWith('/'),
  allowInwardFor: z.array(z.string()).optional(),
  allowedPorts: z.array(z.number().int().min(1).max(65535)).optional(),
  upstreamCa: z.string().optional(),
})
export type GatewaySettings = z.infer<typeof gatewaySettingsSchema>
export const GATEWAY_SETTINGS_ENV = 'CORDON_EGRESS_GATEWAY'
