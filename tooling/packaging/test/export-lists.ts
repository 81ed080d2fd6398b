import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import type { PublishablePackage } from './publishable-packages.js'

/** The JavaScript entry points of a package's `exports` map (programs and data files left out). */
export function moduleEntryPoints(entry: PublishablePackage): Array<[string, string]> {
  const exports = (entry.manifest.exports ?? {}) as Record<string, unknown>
  return Object.entries(exports).flatMap(([subpath, target]) => {
    const file = typeof target === 'string' ? target : (target as { import?: string }).import
    if (!file?.endsWith('.js')) return []
    return [[subpath, join(entry.dir, file)] as [string, string]]
  })
}

/** What one entry point exports at run time, sorted. */
export async function runtimeExports(file: string): Promise<string[]> {
  const module = (await import(pathToFileURL(file).href)) as Record<string, unknown>
  return Object.keys(module).sort()
}

export function pinnedLists(): Record<string, string[]> {
  return JSON.parse(readFileSync(new URL('./exports.json', import.meta.url), 'utf8'))
}
