import { publint } from 'publint'
import { formatMessage } from 'publint/utils'
import { describe, expect, it } from 'vitest'
import { publishablePackages } from './publishable-packages.js'

const publishable = publishablePackages()

describe('packaging of every publishable package (publint, strict)', () => {
  it('finds the packages', () => {
    expect(publishable.length).toBeGreaterThanOrEqual(7)
  })

  for (const { dir, manifest } of publishable) {
    it(`${manifest.name} has no publint errors, warnings or suggestions`, async () => {
      const { messages } = await publint({ pkgDir: dir, strict: true, level: 'suggestion' })
      expect(messages.map((message) => formatMessage(message, manifest) ?? message.code)).toEqual(
        [],
      )
    })
  }
})
