import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import type { PublishablePackage } from './publishable-packages.js'

/**
 * Packs a package as it would be published: with pnpm, which turns
 * `workspace:` ranges into real ones (npm would ship them as they are).
 * Returns the tarball's path.
 */
export function packPackage(entry: PublishablePackage, destination: string): string {
  const output = execFileSync('pnpm', ['pack', '--json', '--pack-destination', destination], {
    cwd: entry.dir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const parsed = JSON.parse(output.slice(output.indexOf('{'))) as { filename: string }
  return parsed.filename.startsWith('/') ? parsed.filename : join(destination, parsed.filename)
}
