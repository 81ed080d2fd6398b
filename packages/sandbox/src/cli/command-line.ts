import { type ParseArgsConfig, parseArgs } from 'node:util'

/**
 * A command line the command cannot run: an unknown flag, a flag value of
 * the wrong kind, a command where flags belong. It names the flag; `cordon`
 * prints it with a pointer to the command's help and exits 64 (EX_USAGE).
 */
export class UsageError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'UsageError'
  }
}

/** Whether the flags (what comes before `--`) ask for the command's help. */
export function asksForHelp(argv: readonly string[]): boolean {
  const separator = argv.indexOf('--')
  const flags = separator >= 0 ? argv.slice(0, separator) : argv
  return flags.includes('--help') || flags.includes('-h')
}

/** One flag, in `util.parseArgs` form. */
export interface FlagSpec {
  readonly type: 'string' | 'boolean'
  readonly short?: string
  readonly multiple?: boolean
  readonly default?: string | boolean | readonly string[]
}

type FlagValue<S extends FlagSpec> = S extends { readonly type: 'string' }
  ? S extends { readonly multiple: true }
    ? string[]
    : string
  : boolean

/** The values of a command's flags: a flag with a default always has one. */
export type FlagValues<Options extends Readonly<Record<string, FlagSpec>>> = {
  [Name in keyof Options]: Options[Name] extends { readonly default: unknown }
    ? FlagValue<Options[Name]>
    : FlagValue<Options[Name]> | undefined
}

/**
 * `util.parseArgs` for a command line of flags and arguments, with its
 * failures as {@link UsageError} naming the flag. A flag that takes one
 * value and is given twice is refused, not settled by the last one.
 */
export function parseCommandLine<const Options extends Readonly<Record<string, FlagSpec>>>(
  argv: readonly string[],
  options: Options,
): { values: FlagValues<Options>; positionals: string[] } {
  let parsed: ReturnType<typeof parseArgs<ParseArgsConfig & { tokens: true }>>
  try {
    parsed = parseArgs({
      args: [...argv],
      options: options as NonNullable<ParseArgsConfig['options']>,
      allowPositionals: true,
      strict: true,
      tokens: true,
    })
  } catch (error) {
    // Node's first sentence names the flag; the rest is advice for its own programs.
    throw new UsageError((error as Error).message.split('. ')[0]!)
  }
  const given = new Map<string, string[]>()
  for (const token of parsed.tokens) {
    if (token.kind !== 'option' || token.value === undefined) continue
    if (options[token.name]?.multiple) continue
    const values = given.get(token.name) ?? []
    values.push(token.value)
    given.set(token.name, values)
  }
  for (const [name, values] of given) {
    if (values.length > 1)
      throw new UsageError(
        `--${name} takes one value, given ${values.length} times (${values.map((value) => `"${value}"`).join(', ')}); give it once`,
      )
  }
  return { values: parsed.values as FlagValues<Options>, positionals: parsed.positionals }
}

/**
 * A command's flags (what comes before `--`), parsed by
 * {@link parseCommandLine}. A word where flags belong is most often the
 * sandbox's command given without `--`, so the error says where it goes.
 */
export function parseFlags<const Options extends Readonly<Record<string, FlagSpec>>>(
  command: string,
  flags: readonly string[],
  options: Options,
  takesCommand: boolean,
): FlagValues<Options> {
  const parsed = parseCommandLine(flags, options)
  if (parsed.positionals.length > 0) {
    throw new UsageError(
      takesCommand
        ? `the sandbox's command goes after --: cordon ${command} [options] -- ${parsed.positionals.join(' ')}`
        : `cordon ${command} takes no arguments, only flags (got "${parsed.positionals[0]}")`,
    )
  }
  return parsed.values
}

/** A flag's value as a whole number of at least 1, or a {@link UsageError} naming the flag. */
export function wholeNumberFlag(flag: string, value: string, unit: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`--${flag} takes a whole number of ${unit}, at least 1 (got "${value}")`)
  }
  return Number(value)
}

/**
 * `--<flag> KEY=VALUE` pairs as a record; a pair without a key or without
 * `=` is refused, not dropped or cut.
 */
export function keyValueFlag(flag: string, pairs: readonly string[]): Record<string, string> {
  const record: Record<string, string> = {}
  for (const pair of pairs) {
    const equals = pair.indexOf('=')
    if (equals <= 0) {
      const key = equals === 0 ? 'KEY' : pair
      throw new UsageError(
        `--${flag} takes KEY=VALUE (got "${pair}"); to pass on your own value, write --${flag} ${key}="$${key}"`,
      )
    }
    record[pair.slice(0, equals)] = pair.slice(equals + 1)
  }
  return record
}

/** `--env KEY=VALUE` pairs as an environment. */
export function environmentFlag(pairs: readonly string[]): Record<string, string> {
  return keyValueFlag('env', pairs)
}
