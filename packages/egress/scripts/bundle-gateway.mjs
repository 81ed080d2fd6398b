// Bundles the gateway program with its dependencies (undici, zod, @cordon/core)
// into one file, dist/cordon-egress-gateway.mjs, that a gateway image needs
// next to a `node` binary and nothing else. (rolldown: its native binary ships
// as a plain package, so installing it runs no build script.)
import { chmod } from 'node:fs/promises'
import { builtinModules } from 'node:module'
import { fileURLToPath } from 'node:url'
import { build } from 'rolldown'

const root = fileURLToPath(new URL('..', import.meta.url))
const builtins = new Set([...builtinModules, ...builtinModules.map((name) => `node:${name}`)])

await build({
  input: `${root}src/gateway.ts`,
  platform: 'node',
  external: (id) => builtins.has(id),
  logLevel: 'warn',
  output: { file: `${root}dist/cordon-egress-gateway.mjs`, format: 'esm', sourcemap: false },
})
await chmod(`${root}dist/cordon-egress-gateway.mjs`, 0o755)
