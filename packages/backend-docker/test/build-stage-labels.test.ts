import { describe, expect, it } from 'vitest'
import { labelEveryStage } from '../src/build-stage-labels.js'

describe('labelEveryStage', () => {
  it('adds the labels after every FROM, a continued one included, and quotes what a Dockerfile would expand', () => {
    const labelled = labelEveryStage(
      'ARG BASE=busybox\nFROM $BASE AS one\nRUN true\nfrom \\\n  # a comment inside\n  busybox\nCOPY --from=one / /\n',
      { a: 'x"y', b: '$HOME\\' },
    )
    const label = 'LABEL "a"="x\\"y" "b"="\\$HOME\\\\"'
    expect(labelled).toEqual({
      dockerfile: `ARG BASE=busybox\nFROM $BASE AS one\n${label}\nRUN true\nfrom \\\n  # a comment inside\n  busybox\n${label}\nCOPY --from=one / /\n`,
      instruction: label,
      added: 2,
    })
  })

  it('follows an escape parser directive', () => {
    const labelled = labelEveryStage('# escape=`\nFROM `\n  busybox\nRUN echo\n', { a: 'b`c' })
    expect(labelled.dockerfile).toBe('# escape=`\nFROM `\n  busybox\nLABEL "a"="b``c"\nRUN echo\n')
  })
})
