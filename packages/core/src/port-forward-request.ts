import { BlockList, isIP } from 'node:net'
import { z } from 'zod'
import { configIssues } from './config.js'
import { type SandboxConfigIssue, SandboxConfigValidationError } from './errors.js'
import type { SandboxForwardOptions } from './sandbox.js'

/** Where a validated `forwardPort` call listens on the host. */
export type PortForwardListener =
  | { readonly kind: 'tcp'; readonly hostAddress: string; readonly hostPort: number }
  | { readonly kind: 'unix' }

const DEFAULT_HOST_ADDRESS = '127.0.0.1'

const loopback = new BlockList()
loopback.addSubnet('127.0.0.0', 8, 'ipv4')
loopback.addAddress('::1', 'ipv6')

/**
 * Whether a listener on `address` is reachable from this machine alone.
 * `BlockList` matches every spelling of an address (`0:0:0:0:0:0:0:1`,
 * `::ffff:127.0.0.1`). A host name other than `localhost` is not: where it
 * resolves is up to DNS, now and later.
 */
function isLoopbackHostAddress(address: string): boolean {
  if (address.toLowerCase() === 'localhost') return true
  const family = isIP(address)
  if (family === 0) return false
  return loopback.check(address, family === 6 ? 'ipv6' : 'ipv4')
}

const signal = z
  .custom<AbortSignal>((value) => value instanceof AbortSignal, 'signal must be an AbortSignal')
  .optional()

const portNumber = (low: number) => {
  const message = `must be an integer from ${low} to 65535`
  return z.number(message).int(message).min(low, message).max(65535, message)
}

const tcpRequestSchema = z.strictObject({
  port: portNumber(1),
  hostAddress: z.string().min(1, 'must not be empty').optional(),
  hostPort: portNumber(0).optional(),
  exposeBeyondLoopback: z.boolean().optional(),
  unixSocket: z.literal(false).optional(),
  signal,
})

const unixRequestSchema = z.strictObject(
  { port: portNumber(1), unixSocket: z.literal(true), signal },
  {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `${issue.keys.join(', ')}: a unix-socket forward has no host address or port (it takes unixSocket and signal)`
        : undefined,
  },
)

/**
 * A TCP listener beyond the loopback lets anyone who reaches that address
 * into the sandbox's server, so it takes the host's explicit word. Checked
 * on the raw input, so it is reported with every other problem even when
 * the rest does not parse.
 */
function exposureIssues(options: Record<string, unknown>): SandboxConfigIssue[] {
  const { hostAddress, exposeBeyondLoopback } = options
  if (typeof hostAddress !== 'string' || hostAddress === '') return []
  if (exposeBeyondLoopback === true || isLoopbackHostAddress(hostAddress)) return []
  return [
    {
      path: 'hostAddress',
      message: `"${hostAddress}" is not a loopback address (127.0.0.0/8, ::1, localhost): anyone who can reach this machine there could connect to the sandbox's port. Set exposeBeyondLoopback: true to listen there anyway, or use { unixSocket: true } for a forward only this user can open`,
    },
  ]
}

/**
 * Validates a `forwardPort` call before anything listens. Every problem (an
 * unknown option among them) is reported in one
 * `SandboxConfigValidationError`.
 */
export function validatePortForwardRequest(
  port: unknown,
  options: SandboxForwardOptions | undefined,
): PortForwardListener {
  const given: unknown = options ?? {}
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new SandboxConfigValidationError('forwardPort request', [
      { path: 'options', message: 'must be an object' },
    ])
  }
  const input: Record<string, unknown> = { ...given, port }
  if (input.unixSocket === true) {
    const parsed = unixRequestSchema.safeParse(input)
    if (!parsed.success) {
      throw new SandboxConfigValidationError('forwardPort request', configIssues(parsed.error))
    }
    return { kind: 'unix' }
  }
  const parsed = tcpRequestSchema.safeParse(input)
  const issues = [...(parsed.success ? [] : configIssues(parsed.error)), ...exposureIssues(input)]
  if (!parsed.success || issues.length > 0) {
    throw new SandboxConfigValidationError('forwardPort request', issues)
  }
  return {
    kind: 'tcp',
    hostAddress: parsed.data.hostAddress ?? DEFAULT_HOST_ADDRESS,
    hostPort: parsed.data.hostPort ?? 0,
  }
}
