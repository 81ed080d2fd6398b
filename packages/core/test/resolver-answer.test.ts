import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  askResolver,
  DEFAULT_RESOLVER_TIMEOUT_MS,
  parseAllowlistEntry,
  resolverRefusedEvent,
} from '../src/backend-kit.js'
import { judgeResolverAnswer } from '../src/resolver-answer.js'

describe("a resolver's answer is judged once, failing closed", () => {
  it('accepts a list of valid entries as it is', () => {
    expect(judgeResolverAnswer(['api.example.com', '.example.org'])).toEqual({
      ok: true,
      allowedHosts: ['api.example.com', '.example.org'],
    })
    expect(judgeResolverAnswer([])).toEqual({ ok: true, allowedHosts: [] })
  })

  it('denies everything when one entry is invalid, and names it', () => {
    const answer = judgeResolverAnswer(['api.example.com', '*.evil.com', 'ok.example.org'])
    expect(answer).toMatchObject({ ok: false, badEntry: '*.evil.com' })
    expect(answer.ok === false && answer.problem).toContain('"*.evil.com"')
  })

  it('denies everything for an answer that is not a list of strings', () => {
    for (const bad of [undefined, null, 'api.example.com', { hosts: [] }, [42]]) {
      expect(judgeResolverAnswer(bad).ok).toBe(false)
    }
  })

  it('never allows a list that holds an entry the matcher would not parse', () => {
    fc.assert(
      fc.property(fc.array(fc.string(), { maxLength: 6 }), (entries) => {
        const answer = judgeResolverAnswer(entries)
        const allValid = entries.every((entry) => parseAllowlistEntry(entry) !== undefined)
        expect(answer.ok).toBe(allValid)
      }),
    )
  })

  it('turns a throwing, rejecting or slow resolver into a denial', async () => {
    expect(
      (
        await askResolver(() => {
          throw new Error('down')
        })
      ).ok,
    ).toBe(false)
    expect((await askResolver(async () => Promise.reject(new Error('no')))).ok).toBe(false)
    const slow = await askResolver(() => new Promise(() => {}), 20)
    expect(slow).toMatchObject({ ok: false })
    expect(slow.ok === false && slow.problem).toContain('20 ms')
    expect(await askResolver(async () => ['a.example.com'])).toEqual({
      ok: true,
      allowedHosts: ['a.example.com'],
    })
  })

  it('gives a resolver five seconds by default', () => {
    expect(DEFAULT_RESOLVER_TIMEOUT_MS).toBe(5_000)
  })

  it('reports a refusal as one lifecycle event naming the problem', () => {
    expect(resolverRefusedEvent('sbx_x' as never, 'container:docker', 'bad "*.x"')).toMatchObject({
      type: 'lifecycle',
      phase: 'egress.resolver-refused',
      sandboxId: 'sbx_x',
      backend: 'container:docker',
      error: { name: 'ResolverAnswerRefused', message: 'bad "*.x"' },
    })
  })
})
