import { describe, expect, it } from 'vitest'
import { validateExecRequest } from '../src/backend-kit.js'
import { SandboxConfigValidationError } from '../src/index.js'

const ROOT = '/mnt/user-data/outputs'

describe('validateExecRequest', () => {
  it("resolves a relative cwd against rootDir, the reference's workspace root", () => {
    expect(validateExecRequest('make', [], { cwd: 'build' }, ROOT).cwd).toBe(`${ROOT}/build`)
    expect(validateExecRequest('make', [], { cwd: './a/../b/' }, ROOT).cwd).toBe(`${ROOT}/b`)
    expect(validateExecRequest('make', [], { cwd: '.' }, ROOT).cwd).toBe(ROOT)
    expect(validateExecRequest('make', [], { cwd: '..' }, ROOT).cwd).toBe('/mnt/user-data')
  })

  it('keeps an absolute cwd, normalised, and leaves an absent one to the sandbox', () => {
    expect(validateExecRequest('ls', [], { cwd: '/tmp//x/' }, ROOT).cwd).toBe('/tmp/x')
    expect(validateExecRequest('ls', ['-l'], {}, ROOT)).toEqual({
      command: 'ls',
      args: ['-l'],
      cwd: undefined,
    })
  })

  it('refuses an empty cwd or one with NUL, with every other problem', () => {
    for (const cwd of ['', 'a\0b']) {
      const error = (() => {
        try {
          validateExecRequest('', [], { cwd }, ROOT)
        } catch (caught) {
          return caught
        }
      })()
      expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
      expect((error as SandboxConfigValidationError).issues.map((issue) => issue.path)).toEqual([
        'command',
        'options.cwd',
      ])
    }
  })

  it('takes onOutputBytes as a function and refuses anything else', () => {
    expect(validateExecRequest('cat', [], { onOutputBytes: () => undefined }, ROOT).command).toBe(
      'cat',
    )
    expect(() =>
      validateExecRequest('cat', [], { onOutputBytes: 'stdout' as never }, ROOT),
    ).toThrow(/onOutputBytes must be a function/)
  })
})
