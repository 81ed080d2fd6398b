import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { readFileSync, readlinkSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { judgeOwner, LABEL, type OwnerJudgement, ownerLabels } from '../src/backend-kit.js'
import { ownerState, processStartToken } from '../src/owner-labels.js'

/**
 * Runs the built owner-labels module in a child started through `prefix`
 * (an `unshare` command line): it prints its own owner labels, what it
 * judges of `labels`, and the start token it reads for their pid.
 */
function otherHost(
  prefix: readonly string[],
  labels: Record<string, string>,
): {
  labels: Record<string, string>
  judged: OwnerJudgement
  startSeen: string | null
} {
  const module = fileURLToPath(new URL('../dist/owner-labels.js', import.meta.url))
  const script = `
    const { ownerLabels, judgeOwner, processStartToken } = await import(${JSON.stringify(module)})
    const theirs = JSON.parse(process.env.OWNER_LABELS)
    process.stdout.write(JSON.stringify({
      labels: ownerLabels('other-host'),
      judged: judgeOwner(theirs),
      startSeen: processStartToken(Number(theirs['cordon.owner.pid'])) ?? null,
    }))
  `
  const run = spawnSync(
    prefix[0]!,
    [...prefix.slice(1), process.execPath, '--input-type=module', '-e', script],
    { env: { ...process.env, OWNER_LABELS: JSON.stringify(labels) }, encoding: 'utf8' },
  )
  expect(run.status, run.stderr).toBe(0)
  return JSON.parse(run.stdout)
}

const children: ChildProcess[] = []
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL')
})

/** A sleeping process of this PID namespace, with the owner labels it would have written. */
async function sleeper(): Promise<{ child: ChildProcess; labels: Record<string, string> }> {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' })
  children.push(child)
  await new Promise((resolve, reject) => child.once('spawn', resolve).once('error', reject))
  const start = processStartToken(child.pid!)
  expect(start).toBeDefined()
  return {
    child,
    labels: {
      ...ownerLabels('owner-test'),
      [LABEL.ownerPid]: String(child.pid),
      [LABEL.ownerStart]: start!,
    },
  }
}

async function exited(child: ChildProcess): Promise<void> {
  const done = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGKILL')
  await done
}

describe('owner labels', () => {
  it('record where the pid means something: the boot id and the PID and time namespaces', () => {
    const labels = ownerLabels('owner-test')
    expect(labels[LABEL.ownerPid]).toBe(String(process.pid))
    expect(labels[LABEL.ownerStart]).toBe(processStartToken(process.pid))
    expect(labels[LABEL.ownerBoot]).toBe(
      readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
    )
    expect(labels[LABEL.ownerPidNamespace]).toBe(readlinkSync('/proc/self/ns/pid'))
    expect(labels[LABEL.ownerPidNamespace]).toMatch(/^pid:\[\d+\]$/)
    expect(labels[LABEL.ownerTimeNamespace]).toBe(readlinkSync('/proc/self/ns/time'))
  })
})

describe('judging an owner in the same PID namespace', () => {
  it('finds this process alive', () => {
    expect(judgeOwner(ownerLabels('owner-test'))).toEqual({ state: 'alive' })
  })

  it('finds a running owner alive and, once it exits, gone', async () => {
    const { child, labels } = await sleeper()
    expect(ownerState(labels)).toBe('alive')
    await exited(child)
    expect(judgeOwner(labels)).toEqual({ state: 'gone' })
  })

  it('finds an owner gone when another process now has its pid', async () => {
    const { labels } = await sleeper()
    expect(ownerState({ ...labels, [LABEL.ownerStart]: '1' })).toBe('gone')
  })
})

describe('an owner it cannot judge is unknown, never gone', () => {
  it('from another boot (another machine, or before this one rebooted)', async () => {
    const { child, labels } = await sleeper()
    await exited(child)
    const elsewhere = { ...labels, [LABEL.ownerBoot]: '00000000-0000-4000-8000-000000000000' }
    expect(judgeOwner(elsewhere)).toEqual({ state: 'unknown', reason: 'other-boot' })
  })

  it('from another PID namespace on this machine, whichever side asks', () => {
    const mine = ownerLabels('owner-test')
    const other = otherHost(['unshare', '--pid', '--fork', '--mount-proc'], mine)
    // Same machine, its own numbering: this process's pid is free over there.
    expect(other.labels[LABEL.ownerBoot]).toBe(mine[LABEL.ownerBoot])
    expect(other.labels[LABEL.ownerPidNamespace]).not.toBe(mine[LABEL.ownerPidNamespace])
    expect(other.startSeen).toBeNull()
    expect(other.judged).toEqual({ state: 'unknown', reason: 'other-pid-namespace' })
    // Its pid 1 exists here too, as someone else; and it has ended by now.
    expect(other.labels[LABEL.ownerPid]).toBe('1')
    expect(judgeOwner(other.labels)).toEqual({ state: 'unknown', reason: 'other-pid-namespace' })
  })

  it('from another time namespace, where start times read differently', () => {
    const mine = ownerLabels('owner-test')
    const other = otherHost(['unshare', '--time', '--boottime', '100000'], mine)
    expect(other.labels[LABEL.ownerPidNamespace]).toBe(mine[LABEL.ownerPidNamespace])
    // The same live process, seen with another start: a start check alone would call it gone.
    expect(other.startSeen).not.toBeNull()
    expect(other.startSeen).not.toBe(mine[LABEL.ownerStart])
    expect(other.judged).toEqual({ state: 'unknown', reason: 'other-time-namespace' })
    expect(judgeOwner(other.labels)).toEqual({ state: 'unknown', reason: 'other-time-namespace' })
  })

  it("when its /proc is another namespace's, and then records no identity of its own", () => {
    const mine = ownerLabels('owner-test')
    // Without --mount-proc the child's /proc still lists this namespace's processes.
    const blind = otherHost(['unshare', '--pid', '--fork'], mine)
    expect(blind.judged).toEqual({ state: 'unknown', reason: 'unjudgeable-here' })
    expect(blind.labels[LABEL.ownerBoot]).toBe('unknown')
    expect(blind.labels[LABEL.ownerPidNamespace]).toBe('unknown')
    expect(blind.labels[LABEL.ownerStart]).toBe('unknown')
    expect(judgeOwner(blind.labels)).toEqual({ state: 'unknown', reason: 'unrecorded' })
  })

  it('from labels without the identity (an older cordon), even when the pid is free here', async () => {
    const { child, labels } = await sleeper()
    await exited(child)
    const older = {
      [LABEL.managed]: '1',
      [LABEL.ownerHost]: labels[LABEL.ownerHost]!,
      [LABEL.ownerPid]: labels[LABEL.ownerPid]!,
      [LABEL.ownerStart]: labels[LABEL.ownerStart]!,
    }
    expect(judgeOwner(older)).toEqual({ state: 'unknown', reason: 'unrecorded' })
    for (const key of [LABEL.ownerBoot, LABEL.ownerPidNamespace, LABEL.ownerTimeNamespace]) {
      const { [key]: _dropped, ...partial } = labels
      expect(ownerState(partial)).toBe('unknown')
    }
    expect(ownerState({ ...labels, [LABEL.ownerPid]: 'x' })).toBe('unknown')
    expect(ownerState({})).toBe('unknown')
  })
})
