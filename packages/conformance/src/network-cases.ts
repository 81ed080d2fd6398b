import { beforeEach, describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

export function networkCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('deny-all egress (denyAllNetwork declared)', () => {
    beforeEach((context) => {
      sandboxes.onlyIf(context, (declared) => declared.denyAllNetwork)
    })

    it(
      'has no interface but loopback and no route',
      async () => {
        const links = await sandboxes.sandbox.exec('ls', ['/sys/class/net'])
        expect(links.stdout.split(/\s+/).filter(Boolean)).toEqual(['lo'])
        const routes = await sandboxes.sandbox.exec('cat', ['/proc/net/route'])
        expect(routes.stdout.trim().split('\n').slice(1)).toEqual([])
      },
      timeout,
    )

    it(
      'cannot resolve names',
      async () => {
        const result = await sandboxes.sandbox.exec('nslookup', ['example.com', '8.8.8.8'], {
          timeout: 15_000,
        })
        expect(result.exitCode).not.toBe(0)
        expect(result.stdout).not.toMatch(/Address:?\s+\d+\.\d+\.\d+\.\d+\s*$/m)
      },
      timeout,
    )

    it(
      'cannot open TCP connections anywhere',
      async () => {
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
      'cannot send UDP',
      async () => {
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
