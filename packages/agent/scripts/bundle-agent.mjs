// Bundles the agent program into the one self-contained file that is copied or
// mounted into a guest: dist/cordon-agent.mjs. It imports only Node's standard
// library, so the guest needs nothing but a `node` binary. (rolldown rather
// than esbuild: it ships its native binary as a plain package, so installing
// it runs no build script.)
import { chmod, readFile, writeFile } from 'node:fs/promises'
import { builtinModules } from 'node:module'
import { fileURLToPath } from 'node:url'
import { build } from 'rolldown'

const root = fileURLToPath(new URL('..', import.meta.url))
const outfile = `${root}dist/cordon-agent.mjs`
const builtins = new Set([...builtinModules, ...builtinModules.map((name) => `node:${name}`)])

await build({
  input: `${root}src/agent.ts`,
  platform: 'node',
  external: (id) => builtins.has(id),
  logLevel: 'warn',
  output: { file: outfile, format: 'esm', banner: '#!/usr/bin/env node', sourcemap: false },
})
// The bundle must stand alone: refuse to ship one that imports anything but Node's standard library.
const text = await readFile(outfile, 'utf8')
for (const match of text.matchAll(/\bfrom\s+["']([^"']+)["']/g)) {
  if (!builtins.has(match[1]))
    throw new Error(`cordon-agent.mjs imports ${match[1]}; the agent must have no dependencies`)
}
await writeFile(outfile, text)
await chmod(outfile, 0o755)
