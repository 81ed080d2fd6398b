import { brokeredCredentialSchema, egressPolicySchema } from '@cordon/core'
import { z } from 'zod'

/**
 * The gateway's control protocol: one JSON object per line on its `control`
 * stream, one acknowledgement per command back on it (between decision
 * events). Over a container's attached stdio this needs no network path
 * between host and gateway, so it works the same with a remote engine and
 * cannot be reached from a sandbox.
 */
const policySchema = egressPolicySchema.refine((policy) => policy.kind !== 'resolver', {
  message: 'the gateway takes resolved lists; the host calls the resolver and sends "static"',
})

/** A client is named by the sandbox id it serves; the name becomes a socket file name. */
export const clientIdSchema = z.string().regex(/^[a-z0-9_]{1,64}$/)

export const gatewayCommandSchema = z.discriminatedUnion('op', [
  z.object({
    id: z.string(),
    op: z.literal('add'),
    clientId: clientIdSchema,
    policy: policySchema,
    brokeredCredentials: z.array(brokeredCredentialSchema).optional(),
  }),
  z.object({
    id: z.string(),
    op: z.literal('set'),
    clientId: clientIdSchema,
    policy: policySchema,
    /** Replaces the client's credentials; without it they are kept. */
    brokeredCredentials: z.array(brokeredCredentialSchema).optional(),
  }),
  z.object({ id: z.string(), op: z.literal('remove'), clientId: clientIdSchema }),
  /** Replaces the Docker host's addresses, which the gateway refuses like its own. */
  z.object({ id: z.string(), op: z.literal('host-addresses'), addresses: z.array(z.string()) }),
])
export type GatewayCommand = z.infer<typeof gatewayCommandSchema>

export interface GatewayAck {
  readonly type: 'ack'
  readonly id: string
  readonly ok: boolean
  readonly error?: string
}

/** Gateway settings, passed as JSON in `CORDON_EGRESS_GATEWAY`. */
export const gatewaySettingsSchema = z.object({
  allowInwardFor: z.array(z.string()).optional(),
  allowedPorts: z.array(z.number().int().min(1).max(65535)).optional(),
  upstreamCa: z.string().optional(),
  /**
   * The addresses of the machine that runs the engine, at start: the gateway
   * sits on a bridge of that machine, which accepts packets for any of its own
   * addresses, so each one is refused as the gateway's own.
   */
  hostAddresses: z.array(z.string()).optional(),
  /** The proxy's limits; the gateway's defaults leave room for every client (see the README). */
  limits: z
    .object({
      maxTunnels: z.number().int().positive().optional(),
      maxTunnelsPerClient: z.number().int().positive().optional(),
      maxConnectionsPerClient: z.number().int().positive().optional(),
    })
    .optional(),
})
export type GatewaySettings = z.infer<typeof gatewaySettingsSchema>
export const GATEWAY_SETTINGS_ENV = 'CORDON_EGRESS_GATEWAY'
