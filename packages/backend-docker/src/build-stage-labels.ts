/**
 * The classic builder puts a build's `labels` only on its final image: the
 * images of the steps before it (and the step containers, made from them)
 * carry none, so what a killed build left could not be told from anyone
 * else's images. This writes a `LABEL` instruction after every `FROM`: each
 * image a stage's steps make, and each container a step runs in, inherits
 * the labels from there on. The base image itself is not touched (the
 * `LABEL` step makes a new image on it). The labels are the same for every
 * build with the same options, so the engine's step cache still matches.
 */
export function labelEveryStage(
  dockerfile: string,
  labels: Readonly<Record<string, string>>,
): LabelledDockerfile {
  const escapeChar = escapeCharacter(dockerfile)
  // In a quoted word the escape character escapes `"`, `$` (which would expand a variable) and itself.
  const quote = (text: string): string =>
    `"${[...text].map((char) => (char === '"' || char === '$' || char === escapeChar ? escapeChar + char : char)).join('')}"`
  const instruction = `LABEL ${Object.entries(labels)
    .map(([key, value]) => `${quote(key)}=${quote(value)}`)
    .join(' ')}`
  const out: string[] = []
  let continued = false
  let inFrom = false
  for (const line of dockerfile.split('\n')) {
    out.push(line)
    const trimmed = line.trim()
    // Comments and blank lines inside a continued instruction do not end it.
    if (continued && (trimmed === '' || trimmed.startsWith('#'))) continue
    if (!continued) {
      if (trimmed === '' || trimmed.startsWith('#')) continue
      inFrom = /^FROM\s/i.test(trimmed)
    }
    continued = trimmed.endsWith(escapeChar)
    if (!continued && inFrom) {
      out.push(instruction)
      inFrom = false
    }
  }
  return {
    dockerfile: out.join('\n'),
    instruction,
    added: out.length - dockerfile.split('\n').length,
  }
}

export interface LabelledDockerfile {
  readonly dockerfile: string
  /**
   * The `LABEL` instruction added, as the engine's step headers name it:
   * those steps are cordon's, not the Dockerfile's, and its output hides them.
   */
  readonly instruction: string
  /** How many were added (one per stage). */
  readonly added: number
}

/** The escape character a `# escape=` parser directive sets (default `\`). */
function escapeCharacter(dockerfile: string): string {
  // Parser directives come first, before any comment, blank line or instruction.
  for (const line of dockerfile.split('\n')) {
    const directive = /^\s*#\s*([a-z]+)\s*=\s*(\S+)\s*$/i.exec(line)
    if (!directive) break
    if (directive[1]!.toLowerCase() === 'escape') return directive[2]!
  }
  return '\\'
}
