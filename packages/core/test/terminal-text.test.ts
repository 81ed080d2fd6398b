import { describe, expect, it } from 'vitest'
import { escapeTerminalControls } from '../src/index.js'

describe('escapeTerminalControls', () => {
  it('makes escape sequences, C1 controls and carriage returns visible', () => {
    expect(escapeTerminalControls('\x1b]0;pwned\x07title\x1b[2J\r\x9b31m')).toBe(
      '\\x1b]0;pwned\\x07title\\x1b[2J\\r\\x9b31m',
    )
    expect(escapeTerminalControls('a\x00b\x7fc')).toBe('a\\x00b\\x7fc')
  })

  it('makes bidirectional overrides visible', () => {
    expect(escapeTerminalControls('file\u202Etxt.exe')).toBe('file\\u202etxt.exe')
  })

  it('keeps text, tabs, newlines and other scripts as they are', () => {
    const text = 'ok\tdone\nünïcödé 日本 😀'
    expect(escapeTerminalControls(text)).toBe(text)
  })

  it('puts a name on one line on request', () => {
    expect(escapeTerminalControls('a\nb\tc', { escapeNewlines: true })).toBe('a\\nb\\tc')
  })
})
