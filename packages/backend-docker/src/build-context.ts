import { readdir } from 'node:fs/promises'
import { join } from 'node:path'

/**
 * What of a build context directory goes to the engine, as paths relative
 * to it: every file and link, and every empty directory (a directory with
 * content is implied by it). Links are sent as links, never followed, so a
 * context cannot send what lies outside it. The `.dockerignore` is applied
 * to this list when the context is packed.
 */
export async function buildContextEntries(root: string): Promise<string[]> {
  const entries: string[] = []
  const walk = async (relative: string): Promise<void> => {
    const children = await readdir(join(root, relative), { withFileTypes: true })
    if (children.length === 0 && relative !== '') entries.push(relative)
    for (const child of children) {
      const path = relative === '' ? child.name : `${relative}/${child.name}`
      if (child.isDirectory()) await walk(path)
      else entries.push(path)
    }
  }
  await walk('')
  return entries.sort()
}
