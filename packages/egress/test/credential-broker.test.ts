import { Readable } from 'node:stream'
import { buffer } from 'node:stream/consumers'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  CredentialBroker,
  checkCredentials,
  maskSecrets,
  PlaceholderMisdirectedError,
  placeholderScanner,
  secretRedactor,
} from '../src/credential-broker.js'

const PLACEHOLDER = 'cordon-placeholder-0001'

describe('CredentialBroker.applyTo', () => {
  const broker = new CredentialBroker([
    {
      host: 'api.example.com',
      header: 'Authorization',
      value: 'Bearer sk-real',
      placeholder: PLACEHOLDER,
    },
    { host: 'API.other.com.', header: 'x-api-key', value: 'real-key' },
  ])

  it('swaps the placeholder in its bound header on the bound host only', () => {
    expect(broker.applyTo('api.example.com', [['authorization', PLACEHOLDER]])).toEqual([
      ['authorization', 'Bearer sk-real'],
    ])
    expect(broker.applyTo('elsewhere.com', [['authorization', PLACEHOLDER]])).toEqual([
      ['authorization', PLACEHOLDER],
    ])
  })

  it('leaves the placeholder alone in any other header', () => {
    expect(broker.applyTo('api.example.com', [['x-note', PLACEHOLDER]])).toEqual([
      ['x-note', PLACEHOLDER],
    ])
  })

  it('sets an unconditional credential, replacing what the client sent under that name', () => {
    expect(
      broker.applyTo('api.other.com', [
        ['X-Api-Key', 'forged'],
        ['accept', '*/*'],
      ]),
    ).toEqual([
      ['accept', '*/*'],
      ['x-api-key', 'real-key'],
    ])
  })

  it('knows which hosts are bound, after normalising the configured names', () => {
    expect(broker.isBound('api.other.com')).toBe(true)
    expect(broker.isBound('api.example.com')).toBe(true)
    expect(broker.isBound('example.com')).toBe(false)
    expect(broker.foreignPlaceholders('api.example.com')).toEqual([])
    expect(broker.foreignPlaceholders('evil.example')).toEqual([PLACEHOLDER])
  })

  it('spots a placeholder in a URL, even percent-encoded', () => {
    const encoded = [...PLACEHOLDER].map((char) => `%${char.charCodeAt(0).toString(16)}`).join('')
    expect(CredentialBroker.carriesPlaceholder(`/x?k=${encoded}`, [PLACEHOLDER])).toBe(true)
    expect(CredentialBroker.carriesPlaceholder('/x?k=%zz', [PLACEHOLDER])).toBe(false)
  })

  it('still decodes every valid escape when another escape is malformed', () => {
    const oneEscaped = `%63${PLACEHOLDER.slice(1)}`
    expect(PLACEHOLDER.startsWith('c')).toBe(true)
    for (const text of [
      `/?x=%ZZ&k=${oneEscaped}`,
      `/?k=${oneEscaped}&x=%`,
      `/?x=%E0%A4&k=${oneEscaped}`,
      `%ZZ ${oneEscaped}`,
      `/?k=${oneEscaped}%zz`,
      `/?k=%E0%A4${oneEscaped}`,
    ]) {
      expect(CredentialBroker.carriesPlaceholder(text, [PLACEHOLDER]), text).toBe(true)
    }
    expect(CredentialBroker.carriesPlaceholder('/?x=%ZZ&k=%63ordon', [PLACEHOLDER])).toBe(false)
  })

  it('finds a placeholder whose characters are beyond ASCII, escaped as UTF-8', () => {
    const placeholder = 'cordon-ph-ünïcode'
    const encoded = encodeURIComponent(placeholder)
    expect(CredentialBroker.carriesPlaceholder(`/?x=%ZZ&k=${encoded}`, [placeholder])).toBe(true)
  })
})

describe('percent-escape decoding (property)', () => {
  it('finds any placeholder, escaped in any mix of bytes, beside any malformed escapes', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 8, maxLength: 24 }).filter((text) => !text.includes('%')),
        fc.array(fc.boolean(), { minLength: 96, maxLength: 96 }),
        fc.constantFrom('%', '%Z', '%ZZ', '%E0%A4', '%G1', ''),
        fc.constantFrom('%', '%Z', '%ZZ', '%C3', ''),
        (placeholder, escapeMask, before, after) => {
          const bytes = [...Buffer.from(placeholder, 'utf8')]
          const encoded = bytes
            .map((byte, index) =>
              escapeMask[index] || byte > 0x7f
                ? `%${byte.toString(16).padStart(2, '0')}`
                : String.fromCharCode(byte),
            )
            .join('')
          return CredentialBroker.carriesPlaceholder(`/?x=${before}&k=${encoded}${after}`, [
            placeholder,
          ])
        },
      ),
    )
  })
})

describe('checkCredentials', () => {
  it('reports every problem at once', () => {
    const issues = checkCredentials([
      { host: '.example.com', header: 'authorization', value: 'v1' },
      { host: 'a.example', header: 'authorization', value: 'v2', placeholder: 'placeholder-1' },
      {
        host: 'a.example',
        header: 'Authorization',
        value: 'v3',
        placeholder: 'placeholder-1-longer',
      },
      {
        host: 'b.example',
        header: 'x',
        value: 'secret-placeholder-2-x',
        placeholder: 'placeholder-2',
      },
    ])
    expect(issues.map((issue) => issue.path)).toEqual([
      '0.host',
      '2.header',
      '2.placeholder',
      '3.placeholder',
    ])
  })
})

describe('placeholderScanner', () => {
  async function scan(chunks: readonly Buffer[]): Promise<Buffer> {
    return buffer(Readable.from(chunks).pipe(placeholderScanner([PLACEHOLDER])))
  }

  function split(data: Buffer, cuts: readonly number[]): Buffer[] {
    const points = [...new Set(cuts.map((cut) => cut % (data.length + 1)))].sort((a, b) => a - b)
    const chunks: Buffer[] = []
    let start = 0
    for (const point of [...points, data.length]) {
      if (point > start) chunks.push(data.subarray(start, point))
      start = Math.max(start, point)
    }
    return chunks
  }

  it('passes any body without the placeholder through unchanged, however it is chunked', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ maxLength: 300 }),
        fc.array(fc.nat(), { maxLength: 8 }),
        async (bytes, cuts) => {
          const data = Buffer.from(bytes)
          fc.pre(!data.includes(PLACEHOLDER))
          expect((await scan(split(data, cuts))).equals(data)).toBe(true)
        },
      ),
      { numRuns: 300 },
    )
  })

  it('catches the placeholder split across any chunk boundary, before any of it is released', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ maxLength: 50 }),
        fc.string({ maxLength: 50 }),
        fc.array(fc.nat(), { maxLength: 8 }),
        async (before, after, cuts) => {
          const data = Buffer.from(`${before}${PLACEHOLDER}${after}`)
          const scanner = placeholderScanner([PLACEHOLDER])
          const released: Buffer[] = []
          scanner.on('data', (chunk: Buffer) => released.push(chunk))
          const failure = new Promise<unknown>((resolve) => {
            scanner.on('error', resolve)
            scanner.on('end', () => resolve(undefined))
          })
          for (const chunk of split(data, cuts)) scanner.write(chunk)
          scanner.end()
          expect(await failure).toBeInstanceOf(PlaceholderMisdirectedError)
          expect(Buffer.concat(released).includes(PLACEHOLDER)).toBe(false)
        },
      ),
      { numRuns: 300 },
    )
  })
})

describe('secret redaction in responses', () => {
  const SECRET = 'sk-live-0123456789'

  it('lists each value and its token part as secrets of the bound host', () => {
    const broker = new CredentialBroker([
      { host: 'a.example', header: 'authorization', value: `Bearer ${SECRET}` },
    ])
    expect(broker.secretsFor('a.example')).toEqual([`Bearer ${SECRET}`, SECRET])
    expect(broker.secretsFor('b.example')).toEqual([])
    expect(maskSecrets(`key ${SECRET}!`, [SECRET])).toBe(`key ${'*'.repeat(SECRET.length)}!`)
  })

  it('masks every occurrence however the body is chunked, keeping its length', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.string({ maxLength: 20 }), fc.constant(SECRET)), { maxLength: 6 }),
        fc.array(fc.nat(), { maxLength: 8 }),
        async (pieces, cuts) => {
          const data = Buffer.from(pieces.join(''))
          const points = [...new Set(cuts.map((cut) => cut % (data.length + 1)))].sort(
            (a, b) => a - b,
          )
          const chunks: Buffer[] = []
          let start = 0
          for (const point of [...points, data.length]) {
            if (point > start) chunks.push(data.subarray(start, point))
            start = Math.max(start, point)
          }
          const out = await buffer(Readable.from(chunks).pipe(secretRedactor([SECRET])))
          expect(out.length).toBe(data.length)
          expect(out.includes(SECRET)).toBe(false)
          expect(out.toString()).toBe(maskSecrets(data.toString(), [SECRET]))
        },
      ),
      { numRuns: 300 },
    )
  })
})
