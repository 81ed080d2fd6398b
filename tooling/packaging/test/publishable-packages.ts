import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export interface PublishablePackage {
  readonly dir: string
  readonly manifest: { readonly name: string } & Record<string, unknown>
}

/** Every package under packages/ that is not private: what npm would receive. */
export function publishablePackages(): PublishablePackage[] {
  const packagesDir = fileURLToPath(new URL('../../../packages', import.meta.url))
  return readdirSync(packagesDir).flatMap((name) => {
    const dir = join(packagesDir, name)
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
      return manifest.private === true ? [] : [{ dir, manifest }]
    } catch {
      return []
    }
  })
}
