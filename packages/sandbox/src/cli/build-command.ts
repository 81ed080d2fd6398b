import { escapeTerminalControls, SandboxConfigValidationError } from '@cordon/core'
import { keyValueFlag, parseCommandLine, UsageError } from './command-line.js'
import { loadDockerBackend } from './docker-backend-module.js'
import type { RunIo } from './run-command.js'

export const BUILD_USAGE = `usage: cordon build --tag TAG [--file DOCKERFILE] [--build-arg KEY=VALUE]... DIR

Builds an image from the Dockerfile in DIR (or --file, relative to DIR) on
the engine, labelled as cordon's, for sandboxes to name as their image (a
template). The build's output goes to stderr; the image's name and id to
stdout. Ctrl-C ends the build and removes what it made.`

/** `cordon build`: a Dockerfile directory becomes an image on the engine; `signal` ends the build. */
export async function buildCommand(
  argv: readonly string[],
  io: RunIo,
  signal: AbortSignal,
): Promise<number> {
  const { values, positionals } = parseCommandLine(argv, {
    tag: { type: 'string', short: 't' },
    file: { type: 'string', short: 'f' },
    'build-arg': { type: 'string', multiple: true, default: [] },
  })
  if (!values.tag) throw new UsageError('--tag is missing: the name to give the image')
  if (positionals.length === 0) {
    throw new UsageError('the directory to build (DIR, holding the Dockerfile) is missing')
  }
  if (positionals.length > 1) {
    throw new UsageError(
      `takes one directory to build, got ${positionals.length}: ${positionals.join(' ')}`,
    )
  }
  const buildArgs = keyValueFlag('build-arg', values['build-arg'])
  // What the Dockerfile's commands print is theirs: inert on a terminal, as `cordon run` makes it.
  const shown = (line: string): string =>
    io.terminal?.stderr ? escapeTerminalControls(line) : line
  const backend = await loadDockerBackend()
  const built = await backend
    .buildImage(
      {},
      {
        context: positionals[0]!,
        tag: values.tag,
        ...(values.file ? { dockerfile: values.file } : {}),
        buildArgs,
        signal,
        onProgress: ({ line }) => io.stderr(`${shown(line)}\n`),
      },
    )
    .catch((error: unknown) => {
      throw buildFlagError(error)
    })
  io.stdout(`cordon build: built ${built.tag} (${built.id})\n`)
  return 0
}

/** Where each build option comes from on the command line. */
const BUILD_FLAGS: Readonly<Record<string, string>> = {
  tag: '--tag',
  dockerfile: '--file',
  context: 'DIR',
  buildArgs: '--build-arg',
}

/** A refusal of what the command line gave, as a {@link UsageError} naming the flag. */
function buildFlagError(error: unknown): unknown {
  if (!SandboxConfigValidationError.isInstance(error)) return error
  return new UsageError(
    error.issues
      .map((issue) => `${BUILD_FLAGS[issue.path.split('.')[0]!] ?? issue.path}: ${issue.message}`)
      .join('; '),
  )
}
