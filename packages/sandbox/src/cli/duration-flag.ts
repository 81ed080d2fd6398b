import { UsageError } from './command-line.js'

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

/**
 * A duration as a person writes one on a command line: a whole number and a
 * unit, `s`, `m`, `h` or `d` (`30d`, `12h`, `0s`). Anything else is a
 * {@link UsageError} naming the flag.
 */
export function parseDurationFlag(flag: string, text: string): number {
  const match = /^(\d+)([smhd])$/.exec(text.trim())
  const ms = match ? Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS] : Number.NaN
  if (!Number.isSafeInteger(ms))
    throw new UsageError(
      `--${flag} takes a whole number and a unit, s, m, h or d (e.g. 30d), not ${JSON.stringify(text)}`,
    )
  return ms
}
