// Bundles the agent program into the self-contained files that are copied or
// mounted into a guest: dist/cordon-agent.mjs (ES module) and
// dist/cordon-agent.cjs (CommonJS, the same code), and the loader that starts
// the CommonJS one from a V8 code cache (dist/cordon-agent-loader.cjs). They import only Node's
// standard library, so the guest needs nothing but a `node` binary. The
// CommonJS build starts sooner (no ES module loader to set up; bench scenario
// 11), which a container backend pays on every create.
// (rolldown rather than esbuild: it ships its native binary as a plain
// package, so installing it runs no build script.) Minified, for the same
// reason: Node parses half as much source and allocates less before the
// first command (bench/misses.md); a source map beside each file maps a
// stack trace back to src/.
import { chmod, readFile } from 'node:fs/promises'
import { builtinModules } from 'node:module'
import { fileURLToPath } from 'node:url'
import { build } from 'rolldown'

const root = fileURLToPath(new URL('..', import.meta.url))
const builtins = new Set([...builtinModules, ...builtinModules.map((name) => `node:${name}`)])

// The loader (src/code-cache-loader.ts) starts the CommonJS build from a V8 code cache.
const bundles = [
  { input: 'agent.ts', format: 'esm', outfile: 'cordon-agent.mjs' },
  { input: 'agent.ts', format: 'cjs', outfile: 'cordon-agent.cjs' },
  { input: 'code-cache-loader.ts', format: 'cjs', outfile: 'cordon-agent-loader.cjs' },
]
for (const { input, format, outfile: name } of bundles) {
  const outfile = `${root}dist/${name}`
  await build({
    input: `${root}src/${input}`,
    platform: 'node',
    external: (id) => builtins.has(id),
    logLevel: 'warn',
    output: { file: outfile, format, banner: '#!/usr/bin/env node', minify: true, sourcemap: true },
  })
  // The bundle must stand alone: refuse to ship one that loads anything but Node's standard library.
  const text = await readFile(outfile, 'utf8')
  const loaded = [
    ...text.matchAll(/\bfrom\s+["']([^"']+)["']/g),
    ...text.matchAll(/\brequire\(\s*["']([^"']+)["']\s*\)/g),
  ]
  for (const match of loaded) {
    if (!builtins.has(match[1]))
      throw new Error(`${outfile} loads ${match[1]}; the agent must have no dependencies`)
  }
  await chmod(outfile, 0o755)
}
