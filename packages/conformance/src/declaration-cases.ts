import type { EgressPolicy, EgressPolicyKind, SandboxCreateConfig } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { expectRefused } from './refusal.js'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/** A policy of each kind, as a host would ask for it. */
const POLICY_OF_KIND: Readonly<Record<EgressPolicyKind, EgressPolicy>> = {
  'deny-all': { kind: 'deny-all' },
  'allow-all': { kind: 'allow-all' },
  static: { kind: 'static', allowedHosts: ['example.com'] },
  resolver: { kind: 'resolver', resolve: async () => ['example.com'] },
}

/**
 * What a backend declares (`provider.enforcement`) against what its
 * provider and sandboxes do: every control it declares it cannot enforce is
 * refused at `create()` with the typed error naming the control and the
 * backend, and `sandbox.enforced` reports the controls that hold, no more.
 * The limits, deny-all networking, pause, terminals and watches are each one
 * case with their subject, proving the control where declared and checking
 * its refusal where not; the egress kinds are here.
 */
export function declarationCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('declared enforcement', () => {
    it(
      'the provider reports the backend it runs and its declaration',
      () => {
        const { provider, declared } = sandboxes
        expect(typeof provider.backend).toBe('string')
        expect(provider.environment).toBe(declared.environment)
        for (const kind of declared.egress) expect(Object.keys(POLICY_OF_KIND)).toContain(kind)
      },
      timeout,
    )

    it(
      'an egress kind not declared is refused at create naming egress.<kind> and the backend (where every kind is declared, none is left to refuse)',
      async () => {
        const kinds = Object.keys(POLICY_OF_KIND) as EgressPolicyKind[]
        const undeclared = kinds.filter((kind) => !sandboxes.declared.egress.includes(kind))
        if (undeclared.length === 0)
          expect([...sandboxes.declared.egress].sort()).toEqual(kinds.sort())
        for (const kind of undeclared)
          await expectRefused(sandboxes, { egress: POLICY_OF_KIND[kind] }, `egress.${kind}`)
      },
      timeout,
    )

    it(
      'sandbox.enforced names the backend and its isolation, and a limit a host cannot choose only as a fixed one',
      async () => {
        const { provider, declared, sandbox } = sandboxes
        const enforced = sandbox.enforced
        expect(enforced.backend).toBe(provider.backend)
        expect(enforced.isolation).toBe(declared.isolation)
        expect(declared.egress).toContain(enforced.egress.kind)
        expect(enforced.execTimeoutMs).toBeGreaterThan(0)
        // A limit the host cannot choose is reported only where the backend holds
        // one regardless (ACI's profile): then it is the same for every sandbox.
        await sandboxes.withFresh({}, async (other) => {
          if (!declared.memoryLimit)
            expect(other.enforced.limits.memoryLimitMb).toBe(enforced.limits.memoryLimitMb)
          if (!declared.processLimit)
            expect(other.enforced.limits.maxProcesses).toBe(enforced.limits.maxProcesses)
        })
      },
      timeout,
    )

    it(
      'sandbox.enforced reports the requested limits it enforces, with their values, and the egress kind asked for',
      async () => {
        const { declared } = sandboxes
        const kind = declared.egress.includes('deny-all') ? 'deny-all' : declared.egress[0]
        const request: SandboxCreateConfig = {
          ...(declared.memoryLimit ? { memoryLimitMb: 200 } : {}),
          ...(declared.processLimit ? { maxProcesses: 48 } : {}),
          ...(kind ? { egress: POLICY_OF_KIND[kind] } : {}),
          timeoutMs: 45_000,
          idleTimeoutMs: 600_000,
        }
        await sandboxes.withFresh(request, async (sandbox) => {
          const enforced = sandbox.enforced
          expect(enforced.backend).toBe(sandboxes.provider.backend)
          expect(enforced.isolation).toBe(declared.isolation)
          if (declared.memoryLimit)
            expect(enforced.limits.memoryLimitMb, 'the requested memoryLimitMb').toBe(200)
          else
            expect(enforced.limits.memoryLimitMb, 'a fixed limit, if any').toBe(
              sandboxes.sandbox.enforced.limits.memoryLimitMb,
            )
          if (declared.processLimit)
            expect(enforced.limits.maxProcesses, 'the requested maxProcesses').toBe(48)
          else
            expect(enforced.limits.maxProcesses, 'a fixed limit, if any').toBe(
              sandboxes.sandbox.enforced.limits.maxProcesses,
            )
          if (kind) expect(enforced.egress.kind).toBe(kind)
          expect(enforced.execTimeoutMs).toBe(45_000)
          expect(enforced.idleTimeoutMs).toBe(600_000)
        })
      },
      timeout,
    )

    it(
      'each writable mount sandbox.enforced names runs a program the sandbox writes there, unless it says noexec, and then refuses it',
      async () => {
        const { sandbox } = sandboxes
        const writable = sandbox.enforced.mounts.filter((mount) => mount.access === 'read-write')
        for (const mount of writable) {
          // Written, marked executable and run by the sandbox's own user, as a build would.
          const ran = await sandbox.exec('sh', [
            '-c',
            'printf "#!/bin/sh\\necho built and ran\\n" > "$1" && chmod 755 "$1" && { "$1"; echo "exit $?"; }; rm -f "$1"',
            'sh',
            `${mount.path.replace(/\/$/, '')}/cordon-conformance-program-${process.pid}`,
          ])
          if (mount.noexec) expect(ran.stdout, `${mount.path} says noexec`).toBe('exit 126\n')
          else
            expect(ran.stdout, `${mount.path} says it runs programs`).toBe(
              'built and ran\nexit 0\n',
            )
        }
      },
      timeout,
    )
  })
}
