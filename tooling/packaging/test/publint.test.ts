import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { publint } from 'publint'
import { formatMessage } from 'publint/utils'
import { describe, expect, it } from 'vitest'

const packagesDir = fileURLToPath(new URL('../../../packages', import.meta.url))
const publishable = readdirSync(packagesDir)
  .map((name) => join(packagesDir, name))
  .filter((dir) => {
    try {
      return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).private !== true
    } catch {
      return false
    }
  })

describe('packaging of every publishable package (publint, strict)', () => {
  it('finds the packages', () => {
    expect(publishable.length).toBeGreaterThanOrEqual(7)
  })

  for (const dir of publishable) {
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
    it(`${manifest.name} has no publint errors, warnings or suggestions`, async () => {
      const { messages } = await publint({ pkgDir: dir, strict: true, level: 'suggestion' })
      expect(messages.map((message) => formatMessage(message, manifest) ?? message.code)).toEqual(
        [],
      )
    })
  }
})
