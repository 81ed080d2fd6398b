import { describe, expect, it } from 'vitest'
import { expectRefused } from './refusal.js'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/**
 * Deny-all egress. Where `denyAllNetwork` is declared, each case proves one
 * way a deny-all sandbox (the shared one: deny-all is core's default) has no
 * network. Where it is declared `false`, each case checks the declaration
 * instead: a backend that does not offer deny-all refuses it naming
 * `egress.deny-all` and the backend, and one that offers it without cutting
 * the network (ACI's group keeps the interface its agent is reached over)
 * shows a deny-all sandbox an interface besides `lo`, so the `false` does
 * not understate.
 */
export function networkCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  /** The declared-`false` half, cheap enough for every case to check. */
  const expectDeclaredFalseHonest = async () => {
    const { declared } = sandboxes
    if (!declared.egress.includes('deny-all')) {
      await expectRefused(sandboxes, { egress: { kind: 'deny-all' } }, 'egress.deny-all')
      return
    }
    const listLinks = async (sandbox: typeof sandboxes.sandbox) =>
      (await sandbox.exec('ls', ['/sys/class/net'])).stdout.split(/\s+/).filter(Boolean)
    const links =
      sandboxes.sandbox.enforced.egress.kind === 'deny-all'
        ? await listLinks(sandboxes.sandbox)
        : await sandboxes.withFresh({ egress: { kind: 'deny-all' } }, listLinks)
    expect(
      links.filter((link) => link !== 'lo'),
      `a deny-all sandbox of a backend declaring denyAllNetwork false keeps an interface besides lo, got ${JSON.stringify(links)}`,
    ).not.toEqual([])
  }

  describe('deny-all egress (denyAllNetwork declared: proved; declared false: refused, or shown to keep a network)', () => {
    it(
      'denyAllNetwork declared: has no interface but loopback and no route; declared false: deny-all is refused naming egress.deny-all and the backend, or a deny-all sandbox keeps an interface besides lo',
      async () => {
        if (!sandboxes.declared.denyAllNetwork) return expectDeclaredFalseHonest()
        const links = await sandboxes.sandbox.exec('ls', ['/sys/class/net'])
        expect(links.stdout.split(/\s+/).filter(Boolean)).toEqual(['lo'])
        const routes = await sandboxes.sandbox.exec('cat', ['/proc/net/route'])
        expect(routes.stdout.trim().split('\n').slice(1)).toEqual([])
      },
      timeout,
    )

    it(
      'denyAllNetwork declared: cannot resolve names; declared false: deny-all is refused or keeps an interface besides lo',
      async () => {
        if (!sandboxes.declared.denyAllNetwork) return expectDeclaredFalseHonest()
        const result = await sandboxes.sandbox.exec('nslookup', ['example.com', '8.8.8.8'], {
          timeout: 15_000,
        })
        expect(result.exitCode).not.toBe(0)
        expect(result.stdout).not.toMatch(/Address:?\s+\d+\.\d+\.\d+\.\d+\s*$/m)
      },
      timeout,
    )

    it(
      'denyAllNetwork declared: cannot open TCP connections anywhere; declared false: deny-all is refused or keeps an interface besides lo',
      async () => {
        if (!sandboxes.declared.denyAllNetwork) return expectDeclaredFalseHonest()
        for (const target of [
          '1.1.1.1 80',
          '169.254.169.254 80',
          '10.0.0.1 80',
          '172.17.0.1 2375',
        ]) {
          const [host, port] = target.split(' ')
          const result = await sandboxes.sandbox.exec('nc', ['-w', '2', host!, port!], {
            stdin: 'GET / HTTP/1.0\r\n\r\n',
            timeout: 15_000,
          })
          expect(result.exitCode, target).not.toBe(0)
        }
      },
      timeout,
    )

    it(
      'denyAllNetwork declared: cannot send UDP; declared false: deny-all is refused or keeps an interface besides lo',
      async () => {
        if (!sandboxes.declared.denyAllNetwork) return expectDeclaredFalseHonest()
        const result = await sandboxes.sandbox.exec(
          'sh',
          ['-c', 'echo ping | nc -u -w 1 8.8.8.8 53'],
          { timeout: 15_000 },
        )
        expect(result.exitCode).not.toBe(0)
        expect(result.stderr).toMatch(/unreachable|network|route/i)
      },
      timeout,
    )
  })
}
