import { parseArgs } from 'node:util'
import { escapeTerminalControls } from '@cordon/core'
import { loadDockerBackend } from './docker-backend-module.js'
import { EXIT_USAGE } from './exit-codes.js'
import type { RunIo } from './run-command.js'

export const BUILD_USAGE = `usage: cordon build --tag TAG [--file DOCKERFILE] [--build-arg KEY=VALUE]... DIR

Builds an image from the Dockerfile in DIR (or --file, relative to DIR) on
the engine, labelled as cordon's, for sandboxes to name as their image (a
template). The build's output goes to stderr; the image's name and id to
stdout. Ctrl-C ends the build and removes what it made.`

/** `cordon build`: a Dockerfile directory becomes an image on the engine. */
export async function buildCommand(argv: readonly string[], io: RunIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: [...argv],
    options: {
      tag: { type: 'string', short: 't' },
      file: { type: 'string', short: 'f' },
      'build-arg': { type: 'string', multiple: true, default: [] },
    },
    allowPositionals: true,
  })
  if (!values.tag || positionals.length !== 1) {
    io.stderr(`${BUILD_USAGE}\n`)
    return EXIT_USAGE
  }
  const buildArgs = Object.fromEntries(
    (values['build-arg'] ?? []).map((pair) => [
      pair.slice(0, pair.indexOf('=')),
      pair.slice(pair.indexOf('=') + 1),
    ]),
  )
  // What the Dockerfile's commands print is theirs: inert on a terminal, as `cordon run` makes it.
  const shown = (line: string): string =>
    io.terminal?.stderr ? escapeTerminalControls(line) : line
  const backend = await loadDockerBackend()
  const interrupt = new AbortController()
  const onSignal = () => interrupt.abort()
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    const built = await backend.buildImage(
      {},
      {
        context: positionals[0]!,
        tag: values.tag,
        ...(values.file ? { dockerfile: values.file } : {}),
        buildArgs,
        signal: interrupt.signal,
        onProgress: ({ line }) => io.stderr(`${shown(line)}\n`),
      },
    )
    io.stdout(`cordon build: built ${built.tag} (${built.id})\n`)
    return 0
  } finally {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
  }
}
