import { SandboxConfigValidationError } from '@cordon/core'
import { MIN_AGENT_SECRET_LENGTH, requireAgentSecret } from '@cordon/core/backend'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { readAgentConfig } from '../src/agent-config.js'
import { newAgentSecret } from '../src/protocol/agent-secret.js'
import { computeAuthProof, verifyAuthProof } from '../src/protocol/auth.js'
import {
  MAX_HOST_GRACE_MS,
  ProtocolError,
  parseAgentMessage,
  parseClientMessage,
} from '../src/protocol/messages.js'

describe('auth proof', () => {
  it('accepts the proof of the right secret and refuses any other', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 16 }),
        fc.string({ minLength: 16 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        (secret, other, nonceBytes) => {
          const nonce = Buffer.from(nonceBytes).toString('hex')
          const proof = computeAuthProof(secret, nonce)
          expect(verifyAuthProof(secret, nonce, proof)).toBe(true)
          if (other !== secret) expect(verifyAuthProof(other, nonce, proof)).toBe(false)
        },
      ),
      { numRuns: 100 },
    )
  })

  it('a proof is bound to its nonce and never contains the secret', () => {
    const secret = newAgentSecret()
    const first = computeAuthProof(secret, 'aa'.repeat(32))
    const second = computeAuthProof(secret, 'bb'.repeat(32))
    expect(first).not.toBe(second)
    expect(verifyAuthProof(secret, 'bb'.repeat(32), first)).toBe(false)
    expect(first).not.toContain(secret)
    expect(verifyAuthProof(secret, 'aa'.repeat(32), first.slice(0, 10))).toBe(false)
  })

  it('mints distinct secrets of 43 base64url characters', () => {
    const secrets = new Set(Array.from({ length: 50 }, () => newAgentSecret()))
    expect(secrets.size).toBe(50)
    for (const secret of secrets) expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/)
  })
})

describe('message validation', () => {
  it('accepts well-formed client requests', () => {
    expect(
      parseClientMessage({
        type: 'exec',
        command: 'ls',
        args: ['-l'],
        env: { A: 'b' },
        stdin: false,
        cwd: '/tmp',
        timeoutMs: 5,
      }),
    ).toEqual({
      type: 'exec',
      command: 'ls',
      args: ['-l'],
      env: { A: 'b' },
      stdin: false,
      cwd: '/tmp',
      timeoutMs: 5,
    })
    expect(parseClientMessage({ type: 'write-file', path: '/x', mode: 0o600, size: 3 })).toEqual({
      type: 'write-file',
      path: '/x',
      mode: 0o600,
      size: 3,
    })
  })

  it('refuses malformed ones with ProtocolError', () => {
    const bad: Array<Record<string, unknown>> = [
      { type: 'exec', command: '', args: [], env: {}, stdin: false },
      { type: 'exec', command: 'ls', args: [1], env: {}, stdin: false },
      { type: 'exec', command: 'ls', args: [], env: { 'A-B': 'x' }, stdin: false },
      { type: 'exec', command: 'ls\0', args: [], env: {}, stdin: false },
      { type: 'exec', command: 'ls', args: [], env: {}, stdin: false, cwd: 'relative' },
      { type: 'read-file', path: 'relative' },
      { type: 'write-file', path: '/x', mode: 0o17777 },
      { type: 'auth', proof: 'XYZ' },
      { type: 'cancel', signal: 'SIGSTOP', reason: 'abort' },
      { type: 'launch-missiles' },
    ]
    for (const message of bad)
      expect(() => parseClientMessage(message), JSON.stringify(message)).toThrow(ProtocolError)
  })

  it('parses hold-host and host-held, and refuses a grace of none or past MAX_HOST_GRACE_MS', () => {
    expect(parseClientMessage({ type: 'hold-host', graceMs: 30_000 })).toEqual({
      type: 'hold-host',
      graceMs: 30_000,
    })
    expect(parseAgentMessage({ type: 'host-held', graceMs: 30_000 })).toEqual({
      type: 'host-held',
      graceMs: 30_000,
    })
    for (const graceMs of [0, -1, 1.5, '30000', undefined, MAX_HOST_GRACE_MS + 1])
      expect(() => parseClientMessage({ type: 'hold-host', graceMs }), String(graceMs)).toThrow(
        ProtocolError,
      )
  })

  it('parses the revision 1 requests and answers, and refuses malformed ones', () => {
    expect(parseClientMessage({ type: 'stat', path: '/out/a', followLinks: false })).toEqual({
      type: 'stat',
      path: '/out/a',
      followLinks: false,
    })
    expect(
      parseClientMessage({
        type: 'exec',
        command: 'x',
        args: [],
        env: {},
        stdin: false,
        keep: true,
      }),
    ).toMatchObject({ keep: true })
    expect(
      parseAgentMessage({ type: 'hello', protocol: 2, nonce: 'ab'.repeat(32), agentVersion: 'v' }),
    ).not.toHaveProperty('revision')
    // A health answer says the lifetime the agent took, when it took one (ACI's detached claims check it).
    const health = {
      type: 'health-ok',
      pid: 7,
      uptimeMs: 3,
      resumes: 0,
      agentVersion: 'v',
      writeRoots: ['/out'],
      readRoots: ['/out'],
    }
    expect(parseAgentMessage({ ...health, lifetimeMs: 60_000 })).toMatchObject({
      lifetimeMs: 60_000,
    })
    expect(parseAgentMessage(health)).not.toHaveProperty('lifetimeMs')
    expect(() => parseAgentMessage({ ...health, lifetimeMs: 0 })).toThrow(ProtocolError)
    // Whether commands run under another uid than the agent's (backend-microvm refuses a guest without).
    expect(parseAgentMessage({ ...health, commandsUnderOtherUid: true })).toMatchObject({
      commandsUnderOtherUid: true,
    })
    expect(parseAgentMessage(health)).not.toHaveProperty('commandsUnderOtherUid')
    expect(() => parseAgentMessage({ ...health, commandsUnderOtherUid: 'yes' })).toThrow(
      ProtocolError,
    )
    expect(
      parseAgentMessage({
        type: 'fs-events',
        events: [{ kind: 'renamed', path: '/out/b', from: '/out/a', directory: false }],
      }),
    ).toEqual({
      type: 'fs-events',
      events: [{ kind: 'renamed', path: '/out/b', from: '/out/a', directory: false }],
    })
    const bad = [
      { type: 'stat', path: 'relative', followLinks: false },
      { type: 'remove', path: '/out/a' },
      { type: 'rename', from: '/out/a', to: 'b' },
      { type: 'watch', path: '/out', recursive: 'yes' },
      { type: 'attach', id: '../x', stdin: false },
      { type: 'make-directory', path: '/out/a', mode: 0o10000 },
    ]
    for (const message of bad)
      expect(() => parseClientMessage(message), JSON.stringify(message)).toThrow(ProtocolError)
    expect(() =>
      parseAgentMessage({
        type: 'fs-events',
        events: [{ kind: 'exploded', path: '/x', directory: false }],
      }),
    ).toThrow(ProtocolError)
    expect(() =>
      parseAgentMessage({ type: 'stat-ok', kind: 'file', size: -1, mode: 0, modifiedMs: 0 }),
    ).toThrow(ProtocolError)
  })

  it('parses a read-files that takes files read while listing, and entries listed without a time', () => {
    // A client that does not say so (an earlier host) gets every entry's time (file-prefetch.ts).
    expect(parseClientMessage({ type: 'read-files', path: '/out' })).toEqual({
      type: 'read-files',
      path: '/out',
    })
    expect(
      parseClientMessage({ type: 'read-files', path: '/out', readWhileListing: true }),
    ).toEqual({ type: 'read-files', path: '/out', readWhileListing: true })
    expect(() =>
      parseClientMessage({ type: 'read-files', path: '/out', readWhileListing: 'yes' }),
    ).toThrow(ProtocolError)
    expect(
      parseAgentMessage({
        type: 'entries',
        entries: [
          { path: '/out/a', size: 3 },
          { path: '/out/b', size: 70_000, modifiedMs: 5 },
        ],
      }),
    ).toEqual({
      type: 'entries',
      entries: [
        { path: '/out/a', size: 3 },
        { path: '/out/b', size: 70_000, modifiedMs: 5 },
      ],
    })
    expect(() =>
      parseAgentMessage({
        type: 'entries',
        entries: [{ path: '/out/a', size: 3, modifiedMs: -1 }],
      }),
    ).toThrow(ProtocolError)
  })

  it('never throws anything but ProtocolError on arbitrary objects', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.constantFrom(
          'exec',
          'auth',
          'write-file',
          'exit',
          'entries',
          'hello',
          'nope',
          'stat',
          'remove',
          'rename',
          'watch',
          'attach',
          'make-directory',
          'stat-ok',
          'fs-events',
          'processes',
          'attached',
          'started',
        ),
        (raw, type) => {
          for (const parse of [parseClientMessage, parseAgentMessage]) {
            try {
              parse({ ...raw, type })
            } catch (error) {
              expect(error).toBeInstanceOf(ProtocolError)
            }
          }
        },
      ),
      { numRuns: 300 },
    )
  })
})

describe("the shortest secret is core's, for the agent and for every transport", () => {
  const agentAccepts = (secret: string): boolean => {
    try {
      readAgentConfig({
        CORDON_AGENT_LISTEN: 'unix:/tmp/cordon-never.sock',
        CORDON_AGENT_SECRET: secret,
      })
      return true
    } catch {
      return false
    }
  }
  const transportAccepts = (secret: string): boolean => {
    try {
      requireAgentSecret(secret, 'test transport')
      return true
    } catch (error) {
      expect(error).toBeInstanceOf(SandboxConfigValidationError)
      return false
    }
  }

  it('accepts a secret of exactly the minimum length and refuses one character less, on both sides', () => {
    const enough = 'x'.repeat(MIN_AGENT_SECRET_LENGTH)
    const short = enough.slice(1)
    expect([agentAccepts(enough), transportAccepts(enough)]).toEqual([true, true])
    expect([agentAccepts(short), transportAccepts(short)]).toEqual([false, false])
  })

  it('mints secrets the agent accepts', () => {
    expect(newAgentSecret().length).toBeGreaterThanOrEqual(MIN_AGENT_SECRET_LENGTH)
  })
})

describe('CORDON_AGENT_POOL_THREADS', () => {
  const base = { CORDON_AGENT_LISTEN: 'stdio', CORDON_AGENT_SECRET_STDIN: '1' }

  it('is the libuv pool size the agent sets for itself, and is scrubbed from the environment', () => {
    const env: Record<string, string | undefined> = { ...base, CORDON_AGENT_POOL_THREADS: '1' }
    expect(readAgentConfig(env).poolThreads).toBe(1)
    expect(env.CORDON_AGENT_POOL_THREADS).toBeUndefined()
    expect(readAgentConfig({ ...base }).poolThreads).toBeUndefined()
  })

  it.each(['0', '-1', '1.5', 'two', '1025'])('refuses %s, naming the variable', (value) => {
    expect(() => readAgentConfig({ ...base, CORDON_AGENT_POOL_THREADS: value })).toThrow(
      /CORDON_AGENT_POOL_THREADS/,
    )
  })
})
