import { UsageError } from './command-line.js'

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

/**
 * A duration as a person writes one on a command line: a number and a unit,
 * `ms`, `s`, `m`, `h` or `d` (`30d`, `12h`, `1.5h`, `500ms`). Zero is taken
 * only where the flag means "now" (`--volume-retention 0s`: every unused
 * volume); elsewhere, and for anything else, a {@link UsageError} naming the
 * flag (and giving `example`, a value that makes sense for it).
 */
export function parseDurationFlag(
  flag: string,
  text: string,
  {
    zero = 'allowed',
    example = '30d',
  }: { readonly zero?: 'allowed' | 'refused'; readonly example?: string } = {},
): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim())
  const ms = match
    ? Math.round(Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS])
    : Number.NaN
  if (!Number.isSafeInteger(ms))
    throw new UsageError(
      `--${flag} takes a number and a unit, ms, s, m, h or d (e.g. ${example}), not ${JSON.stringify(text)}`,
    )
  if (ms === 0 && zero === 'refused')
    throw new UsageError(`--${flag} must be longer than 0, got ${JSON.stringify(text)}`)
  return ms
}
