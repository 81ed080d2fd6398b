/**
 * Text a sandbox produced (command output, file names from `listFiles`) may
 * hold terminal control sequences: an escape that retitles the window, clears
 * the screen, rewrites what was printed before, or, on some terminals, asks
 * the terminal to answer with input of its own. Printed to a terminal as it
 * is, it acts on the operator's terminal. {@link escapeTerminalControls}
 * makes such text inert for display.
 */

/**
 * C0 controls but tab and line feed, DEL, C1 controls (0x9b is a one-byte
 * CSI on some terminals), and the bidirectional overrides and isolates that
 * make text display in another order than it reads.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu

/**
 * Replaces every control character in `text` with a visible escape
 * (`\x1b`, `\r`, `\u202e`) so that the text can be written to a terminal
 * without acting on it. Tab and line feed stay as they are unless
 * `escapeNewlines` is set (a file name should print on one line).
 */
export function escapeTerminalControls(
  text: string,
  options: { readonly escapeNewlines?: boolean } = {},
): string {
  const escaped = text.replace(CONTROL, visible)
  return options.escapeNewlines ? escaped.replace(/[\n\t]/g, visible) : escaped
}

function visible(character: string): string {
  const code = character.codePointAt(0)!
  if (character === '\n') return '\\n'
  if (character === '\t') return '\\t'
  if (character === '\r') return '\\r'
  return code <= 0xff
    ? `\\x${code.toString(16).padStart(2, '0')}`
    : `\\u${code.toString(16).padStart(4, '0')}`
}
