import { readFileSync } from 'node:fs'

/**
 * The capabilities this process holds in effect, from `/proc/self/status`
 * (the agent loads no native code to ask the kernel otherwise).
 */

/** Capability numbers the agent asks about (linux/capability.h). */
export const CAPABILITY = {
  CHOWN: 0,
  DAC_OVERRIDE: 1,
  FOWNER: 3,
  SYS_PTRACE: 19,
} as const

export type CapabilityName = keyof typeof CAPABILITY

/** The named capabilities this process lacks; all of them if the status cannot be read. */
export function missingCapabilities(names: readonly CapabilityName[]): CapabilityName[] {
  let effective = 0n
  try {
    const line = /^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))
    if (line) effective = BigInt(`0x${line[1]}`)
  } catch {
    // Unreadable: nothing can be shown to be held.
  }
  return names.filter((name) => ((effective >> BigInt(CAPABILITY[name])) & 1n) === 0n)
}
