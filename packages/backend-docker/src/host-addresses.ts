import { networkInterfaces } from 'node:os'

/**
 * How often the host's addresses are read again while a gateway runs: the
 * same bound a standalone `@cordon/egress` proxy puts on its own reading of
 * its interfaces, so the gateway's screen is never staler than that proxy's.
 */
export const HOST_ADDRESS_CHECK_MS = 1_000

/**
 * Every address on this machine's interfaces, sorted so two readings compare
 * as text. With a local engine this machine is the Docker host: a container
 * on its bridge reaches a service bound to 0.0.0.0 through any of them, the
 * public ones included, which the gateway cannot see from its own interfaces.
 */
export function hostInterfaceAddresses(): string[] {
  const addresses = new Set<string>()
  for (const entries of Object.values(networkInterfaces()))
    for (const entry of entries ?? []) addresses.add(entry.address)
  return [...addresses].sort()
}

/**
 * Reads the addresses every `HOST_ADDRESS_CHECK_MS` and calls `onChange` with
 * the new list when it differs from the last one seen. Returns the stop.
 */
export function watchHostAddresses(
  read: () => readonly string[],
  initial: readonly string[],
  onChange: (addresses: readonly string[]) => void,
): () => void {
  let last = initial.join(',')
  const timer = setInterval(() => {
    const now = read()
    const key = now.join(',')
    if (key === last) return
    last = key
    onChange(now)
  }, HOST_ADDRESS_CHECK_MS)
  timer.unref()
  return () => clearInterval(timer)
}
