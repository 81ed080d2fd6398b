import {
  type CordonSandbox,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * `decoy`'s credential relabelled as `target`'s: well-formed, naming the
 * right sandbox and backend, holding a real secret, but not the target's.
 * Only the target's agent can tell, so this proves the agent checks it.
 */
function borrowedCredential(decoy: CordonSandbox, target: CordonSandbox): string {
  const credential = decoy.credential!
  const dot = credential.lastIndexOf('.')
  const fields = JSON.parse(Buffer.from(credential.slice(dot + 1), 'base64url').toString())
  fields.sandboxId = target.id
  return `${credential.slice(0, dot + 1)}${Buffer.from(JSON.stringify(fields)).toString('base64url')}`
}

/** Reconnect: proved where declared, checked as a refusal where not. */
export function reconnectCases(options: SandboxConformanceOptions, sandboxes: SandboxesUnderTest) {
  const timeout = options.timeoutMs ?? 60_000

  describe('reconnect', () => {
    it(
      'reconnect: where declared, a detached sandbox is reached by id from a second provider (exec, list, a snapshot where declared, destroy) and a wrong credential is refused; where not, detached and connect are refused naming the control',
      async () => {
        const provider = sandboxes.provider
        if (!sandboxes.declared.reconnect) {
          const created = await provider
            .create({ detached: true, lifetimeMs: 60_000 })
            .catch((caught: unknown) => caught)
          expect(SandboxControlRefusedError.isInstance(created), 'detached is refused').toBe(true)
          expect((created as SandboxControlRefusedError).control).toBe('detached')
          expect((created as SandboxControlRefusedError).backend).toBe(provider.backend)
          const connected = await provider
            .connect(sandboxes.sandbox.id)
            .catch((caught: unknown) => caught)
          expect(SandboxControlRefusedError.isInstance(connected), 'connect is refused').toBe(true)
          expect((connected as SandboxControlRefusedError).control).toBe('connect')
          expect((connected as SandboxControlRefusedError).backend).toBe(provider.backend)
          // Nothing changed: the shared sandbox runs as before.
          expect((await sandboxes.sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
          return
        }

        const first = await provider.create({ detached: true, lifetimeMs: 120_000 })
        const decoy = await provider.create({ detached: true, lifetimeMs: 120_000 })
        const second = options.createProvider()
        try {
          expect(first.detached).toBe(true)
          expect(first.credential).toBeTypeOf('string')
          await first.writeFile('reconnect.txt', 'written through the first provider')

          const reached = await second.connect(first.id, { credential: first.credential! })
          expect(reached.id).toBe(first.id)
          const read = await reached.exec('cat', ['reconnect.txt'])
          expect(read.stdout).toBe('written through the first provider')
          expect(read.exitCode).toBe(0)
          const listed = (await second.list()).find((entry) => entry.id === first.id)
          expect(listed, 'the second provider lists it').toBeDefined()
          expect(listed!.detached).toBe(true)
          expect(listed!.endsAt).toBeGreaterThan(Date.now())

          // Reached again, it is the same sandbox: where the backend takes
          // snapshots, one taken through the connection holds its files.
          if (sandboxes.declared.snapshot) {
            const snapshot = await reached.snapshot()
            try {
              const copy = await second.create({ snapshot: snapshot.id })
              try {
                expect((await copy.readFile('reconnect.txt')).toString()).toBe(
                  'written through the first provider',
                )
              } finally {
                await copy.destroy()
              }
            } finally {
              await second.snapshots.remove(snapshot.id)
            }
          }

          const refused = await second
            .connect(first.id, { credential: borrowedCredential(decoy, first) })
            .catch((caught: unknown) => caught)
          expect(SandboxCredentialRefusedError.isInstance(refused), 'a wrong credential').toBe(true)

          // Destroyed from the second provider, it ends for everyone.
          await reached.destroy()
          let stillListed = true
          for (let attempt = 0; attempt < 60 && stillListed; attempt++) {
            const entry = (await second.list()).find((listing) => listing.id === first.id)
            stillListed = entry !== undefined && entry.status !== 'ending'
            if (stillListed) await sleep(500)
          }
          expect(stillListed, 'gone from the list after destroy').toBe(false)
          const after = await first.exec('true').catch((caught: unknown) => caught)
          expect(after, 'the first handle can run nothing more').toBeInstanceOf(Error)
        } finally {
          await Promise.allSettled([first.destroy(), decoy.destroy()])
          await second.close()
        }
      },
      timeout * 2,
    )
  })
}
