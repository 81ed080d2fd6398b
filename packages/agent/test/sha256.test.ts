import { createHash, createHmac } from 'node:crypto'
import { readdirSync, readlinkSync } from 'node:fs'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { constantTimeEqual, hmacSha256, sha256 } from '../src/protocol/sha256.js'
import { randomBytes } from '../src/random-bytes.js'

const hex = (text: string) => Buffer.from(text, 'hex')
const ascii = (text: string) => Buffer.from(text, 'latin1')

describe("the agent's SHA-256 and HMAC-SHA256 (protocol/sha256.ts)", () => {
  it('gives the FIPS 180-4 example digests', () => {
    expect(sha256(ascii('abc')).toString('hex')).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    )
    expect(sha256(ascii('')).toString('hex')).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    )
    expect(
      sha256(ascii('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq')).toString('hex'),
    ).toBe('248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1')
    expect(sha256(Buffer.alloc(1_000_000, 'a')).toString('hex')).toBe(
      'cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0',
    )
  })

  it('gives the RFC 4231 HMAC-SHA256 results', () => {
    const cases: Array<[Buffer, Buffer, string]> = [
      [
        Buffer.alloc(20, 0x0b),
        ascii('Hi There'),
        'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7',
      ],
      [
        ascii('Jefe'),
        ascii('what do ya want for nothing?'),
        '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843',
      ],
      [
        Buffer.alloc(20, 0xaa),
        Buffer.alloc(50, 0xdd),
        '773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe',
      ],
      [
        hex('0102030405060708090a0b0c0d0e0f10111213141516171819'),
        Buffer.alloc(50, 0xcd),
        '82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b',
      ],
      // A key longer than the block: hashed first.
      [
        Buffer.alloc(131, 0xaa),
        ascii('Test Using Larger Than Block-Size Key - Hash Key First'),
        '60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54',
      ],
    ]
    for (const [key, message, expected] of cases)
      expect(hmacSha256(key, message).toString('hex')).toBe(expected)
  })

  it('agrees with node:crypto on any input, split into any parts', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 4 }),
        fc.uint8Array({ maxLength: 200 }),
        (parts, key) => {
          const whole = Buffer.concat(parts)
          expect(sha256(...parts).equals(createHash('sha256').update(whole).digest())).toBe(true)
          expect(
            hmacSha256(key, whole).equals(createHmac('sha256', key).update(whole).digest()),
          ).toBe(true)
        },
      ),
      { numRuns: 500 },
    )
  })

  it('compares byte strings by content and length', () => {
    expect(constantTimeEqual(hex('00ff'), hex('00ff'))).toBe(true)
    expect(constantTimeEqual(hex('00ff'), hex('00fe'))).toBe(false)
    expect(constantTimeEqual(hex('00ff'), hex('00ff00'))).toBe(false)
    expect(constantTimeEqual(hex(''), hex(''))).toBe(true)
  })
})

describe("the agent's random bytes (random-bytes.ts)", () => {
  it('come from the kernel device, and differ every time', () => {
    const seen = new Set<string>()
    for (let i = 0; i < 100; i++) {
      const bytes = randomBytes(32)
      expect(bytes.byteLength).toBe(32)
      seen.add(bytes.toString('hex'))
    }
    expect(seen.size).toBe(100)
    // The descriptor it reads is /dev/urandom itself, kept open. Read from this
    // process's own table, link by link: the test runner opens and closes
    // descriptors meanwhile, and one gone between the listing and its link
    // is skipped (an `ls -l` of the table failed on such a one under load).
    const targets = readdirSync('/proc/self/fd').map((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`)
      } catch {
        return undefined
      }
    })
    expect(targets).toContain('/dev/urandom')
    expect(randomBytes(0).byteLength).toBe(0)
    expect(randomBytes(100_000).byteLength).toBe(100_000)
  })
})
