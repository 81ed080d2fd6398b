import { type ChildProcess, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { LABEL } from '@cordon/core/backend'
import { afterEach, describe, expect, it } from 'vitest'
import { collectGarbage, type GarbageReport } from '../src/index.js'
import { docker, testProvider } from './test-run.js'

const started: ChildProcess[] = []
// A host that a failed assertion left waiting for its go-ahead; --kill-child takes its namespace down with it.
afterEach(() => {
  for (const child of started.splice(0))
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
})

interface OtherHostDryRun {
  readonly labels: Record<string, string>
  readonly deadOwner: string | null
  readonly dryRun: GarbageReport
}

/**
 * Starts fixtures/other-namespace-gc.mjs in a PID namespace of its own, on
 * this machine and engine, and hands back its dry run; `remove()` lets it
 * collect for real and resolves with that report.
 */
async function hostInAnotherPidNamespace(
  options: { deadOwner?: boolean } = {},
): Promise<OtherHostDryRun & { remove(): Promise<GarbageReport> }> {
  const script = fileURLToPath(new URL('./fixtures/other-namespace-gc.mjs', import.meta.url))
  const unshare = ['--pid', '--fork', '--mount-proc', '--kill-child']
  const child = spawn('unshare', [...unshare, process.execPath, script], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: {
      ...process.env,
      CORDON_TEST_GC: 'remove',
      CORDON_TEST_DEAD_OWNER: options.deadOwner ? '1' : '0',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  started.push(child)
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve))
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  const nextLine = async (): Promise<string> => {
    const line = await lines.next()
    if (line.done) throw new Error(`the other host ended with ${await exited}: ${stderr}`)
    return line.value
  }
  const first = JSON.parse(await nextLine()) as OtherHostDryRun
  return {
    ...first,
    remove: async () => {
      child.stdin.end('go\n')
      const { removed } = JSON.parse(await nextLine()) as { removed: GarbageReport }
      expect(await exited, stderr).toBe(0)
      return removed
    },
  }
}

describe('owners in other PID namespaces on one engine', () => {
  it("a host in another PID namespace, with the same hostname, neither lists nor removes a live host's sandbox", async () => {
    const live = testProvider()
    try {
      const sandbox = await live.create()
      const container = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      const labels = container.Config.Labels

      const other = await hostInAnotherPidNamespace()
      // Same machine, same name; only the PID namespace differs, and in it
      // this process's pid is free.
      expect(other.labels[LABEL.ownerHost]).toBe(labels[LABEL.ownerHost])
      expect(other.labels[LABEL.ownerBoot]).toBe(labels[LABEL.ownerBoot])
      expect(other.labels[LABEL.ownerPidNamespace]).not.toBe(labels[LABEL.ownerPidNamespace])
      expect(other.dryRun.containers).not.toContain(container.Id)
      expect(other.dryRun.unjudged).toContainEqual({
        kind: 'container',
        id: container.Id,
        reason: 'other-pid-namespace',
      })

      const removed = await other.remove()
      expect(removed.containers).not.toContain(container.Id)
      expect((await docker.getContainer(container.Id).inspect()).State.Running).toBe(true)
      expect(await sandbox.exec('echo', ['still here'])).toMatchObject({
        exitCode: 0,
        stdout: 'still here\n',
      })
    } finally {
      await live.close()
    }
  })

  it("a dead owner's leftover is swept by a host in the owner's PID namespace, and only there", async () => {
    const live = testProvider()
    let dead: string | null = null
    try {
      const sandbox = await live.create()
      const liveId = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).Id

      // A process of the other host's namespace left a container and exited.
      const other = await hostInAnotherPidNamespace({ deadOwner: true })
      dead = other.deadOwner
      expect(dead).toMatch(/^[0-9a-f]{64}$/)
      expect(other.dryRun.containers).toContain(dead)
      expect(other.dryRun.containers).not.toContain(liveId)

      // From this namespace that owner cannot be judged: kept, and said why.
      const here = await collectGarbage({ docker, dryRun: true })
      expect(here.containers).not.toContain(dead)
      expect(here.unjudged).toContainEqual({
        kind: 'container',
        id: dead,
        reason: 'other-pid-namespace',
      })

      const removed = await other.remove()
      expect(removed.containers).toContain(dead)
      await expect(docker.getContainer(dead!).inspect()).rejects.toMatchObject({
        statusCode: 404,
      })
      expect(await sandbox.exec('echo', ['still here'])).toMatchObject({
        exitCode: 0,
        stdout: 'still here\n',
      })
    } finally {
      await live.close()
      if (dead)
        await docker
          .getContainer(dead)
          .remove({ force: true })
          .catch(() => {})
    }
  })
})
