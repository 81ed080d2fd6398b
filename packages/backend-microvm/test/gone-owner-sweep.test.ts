/**
 * Which guests the sweep of gone hosts deletes (gone-owner-sweep.ts), over a
 * control plane that answers a listing as the stand-in does: only a guest,
 * not detached, whose creating process ran on this boot of this machine, in
 * these namespaces, and has ended. The end-to-end case (a host SIGKILLed
 * with its sandbox paused) is host-gone.test.ts's.
 */
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { LABEL, ownerLabels } from '@cordon/core/backend'
import { describe, expect, it } from 'vitest'
import type { ControlPlaneClient } from '../src/control-plane-client.js'
import { removeGuestsOfGoneOwners } from '../src/gone-owner-sweep.js'

/** The owner labels of a Node process that has exited since. */
function deadOwnersLabels(): Record<string, string> {
  const made = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      "import { ownerLabels } from '@cordon/core/backend'; process.stdout.write(JSON.stringify(ownerLabels('dead')))",
    ],
    { cwd: fileURLToPath(new URL('..', import.meta.url)), encoding: 'utf8' },
  )
  expect(made.status, made.stderr).toBe(0)
  return JSON.parse(made.stdout) as Record<string, string>
}

/** A control plane holding `guests`, answering a listing by its labels and recording deletions. */
function controlPlaneOf(guests: Record<string, Record<string, string>>) {
  const deleted: string[] = []
  const asked: Array<Readonly<Record<string, string>>> = []
  const client = {
    async listSandboxes(labels: Readonly<Record<string, string>>) {
      asked.push(labels)
      return Object.entries(guests)
        .filter(([, held]) => Object.entries(labels).every(([key, value]) => held[key] === value))
        .map(([sandboxId, held]) => ({ sandboxId, state: 'paused', labels: held }))
    },
    async deleteSandbox(sandboxId: string) {
      deleted.push(sandboxId)
    },
  }
  return { client: client as unknown as ControlPlaneClient, deleted, asked }
}

describe('the sweep of gone hosts', () => {
  it('deletes only a guest, not detached, whose owner this machine can tell has ended; --dry-run names it and deletes nothing', async () => {
    const dead = deadOwnersLabels()
    const managed = { [LABEL.managed]: '1' }
    const { client, deleted, asked } = controlPlaneOf({
      sbx_gone: { ...dead, ...managed },
      sbx_alive: { ...ownerLabels('alive'), ...managed },
      sbx_detached: {
        ...dead,
        ...managed,
        [LABEL.detached]: '1',
        [LABEL.expires]: String(Date.now() + 60_000),
      },
      // Made on another boot (another machine, or before a reboot): cannot be placed, kept.
      sbx_other_boot: { ...dead, ...managed, [LABEL.ownerBoot]: 'another-boot' },
      // Without a namespace: cannot be placed, kept.
      sbx_unscoped: { ...dead, ...managed, [LABEL.ownerPidNamespace]: 'unknown' },
      // Made before guests carried owner labels.
      sbx_unlabelled: { ...managed },
    })
    const signal = AbortSignal.timeout(10_000)
    expect(await removeGuestsOfGoneOwners(client, signal, true)).toEqual(['sbx_gone'])
    expect(deleted).toEqual([])
    expect(await removeGuestsOfGoneOwners(client, signal)).toEqual(['sbx_gone'])
    expect(deleted).toEqual(['sbx_gone'])
    // It asks only for cordon's guests made on this boot.
    expect(asked.at(-1)).toEqual({
      ...managed,
      [LABEL.ownerBoot]: ownerLabels('x')[LABEL.ownerBoot],
    })
  })
})
