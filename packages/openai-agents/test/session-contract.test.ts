import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { createDockerSandboxProvider } from '@cordon/backend-docker'
import { containerTestBackend, EPHEMERAL_OUTPUTS, until } from '@cordon/test-support'
import { Runner } from '@openai/agents-core'
import {
  Manifest,
  SandboxAgent,
  SandboxApplyPatchFileNotFoundError,
  SandboxApplyPatchPathError,
  SandboxConfigurationError,
  SandboxExecTimeoutError,
  SandboxLifecycleError,
  SandboxPathResolutionError,
  SandboxUnsupportedFeatureError,
  SandboxWorkspaceReadNotFoundError,
  shell,
} from '@openai/agents-core/sandbox'
import { truncateOutput } from '@openai/agents-core/sandbox/internal'
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
} from '@openai/agents-core/testing'
import { afterAll, describe, expect, it } from 'vitest'
import { CordonSandboxClient } from '../src/index.js'
import { testProvider } from './test-run.js'

const run = promisify(execFile)
const provider = testProvider()
afterAll(async () => {
  await provider.close()
})

describe('CordonSandboxClient: session state', () => {
  it('serialises, deserialises and resumes onto the same live sandbox within the process', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create({
      manifest: { environment: { KEPT: 'yes', SECRET: { value: 's3cret', ephemeral: true } } },
    })
    try {
      await session.exec({ cmd: 'echo before > state.txt' })
      const serialized = JSON.parse(
        JSON.stringify(await client.serializeSessionState(session.state)),
      )
      // An ephemeral value never leaves the process in the serialised state.
      expect(JSON.stringify(serialized)).not.toContain('s3cret')
      expect(serialized).toMatchObject({ sandboxId: session.sandbox.id, providerId: provider.id })
      const state = await client.deserializeSessionState(serialized)
      expect(client.canReusePreservedOwnedSession(state)).toBe(true)
      const resumed = await client.resume(state)
      expect(resumed.sandbox).toBe(session.sandbox)
      expect((await resumed.exec({ cmd: 'cat state.txt; echo "$KEPT $SECRET"' })).output).toBe(
        'before\nyes s3cret\n',
      )

      // The SDK's runner resumes an explicit session state through the client.
      const model = new ScriptedModel([
        [functionCall('exec_command', { cmd: 'echo after >> state.txt' }, { callId: 'c1' })],
        modelResponder(async () => {
          seen = (await session.sandbox.readFile('/workspace/state.txt')).toString()
          return [assistantMessage('ok')]
        }),
      ])
      let seen = ''
      const agent = new SandboxAgent({ name: 'w', model, capabilities: [shell()] })
      await new Runner().run(agent, 'go', { sandbox: { client, sessionState: state } })
      model.assertComplete()
      expect(seen).toBe('before\nafter\n')
      // The run resumed the session, so it owned it and cleaned it up at the end.
      expect(session.sandbox.status).toBe('destroyed')
    } finally {
      await client.delete(session.state)
    }
  })

  it('refuses, in the SDK’s lifecycle terms, a state whose sandbox this process does not hold', async () => {
    const first = new CordonSandboxClient(provider)
    const session = await first.create()
    try {
      const serialized = await first.serializeSessionState(session.state)
      // A second client stands for another process: it never saw the sandbox.
      const other = new CordonSandboxClient(provider)
      const state = await other.deserializeSessionState(JSON.parse(JSON.stringify(serialized)))
      expect(other.canReusePreservedOwnedSession(state)).toBe(false)
      const refused = await other.resume(state).catch((error: unknown) => error)
      expect(refused).toBeInstanceOf(SandboxLifecycleError)
      expect((refused as SandboxLifecycleError).message).toContain('another process')
    } finally {
      await first.delete(session.state)
    }
    // After delete, not even the creating client resumes it.
    await expect(first.resume(session.state)).rejects.toBeInstanceOf(SandboxLifecycleError)
  })
})

describe('CordonSandboxClient: resume across processes', () => {
  it('resumes in this process a detached session another process created and serialized, and deletes it', async () => {
    const store = mkdtempSync(join(tmpdir(), 'cordon-agents-credentials-'))
    const here = createDockerSandboxProvider({
      backend: containerTestBackend(),
      layout: { outputs: { source: { type: 'ephemeral' }, containerPath: '/workspace' } },
      credentialStore: store,
    })
    try {
      const { stdout } = await run(
        process.execPath,
        [fileURLToPath(new URL('./fixtures/detached-session.mjs', import.meta.url))],
        { env: { ...process.env, CORDON_TEST_STORE: store }, timeout: 120_000 },
      )
      // The first process has exited; its serialized state is all this one has.
      const client = new CordonSandboxClient(here)
      const state = await client.deserializeSessionState(JSON.parse(stdout))
      expect(client.canReusePreservedOwnedSession(state)).toBe(false)
      const resumed = await client.resume(state)
      expect(resumed.sandbox.id).toBe(state.sandboxId)
      expect((await resumed.exec({ cmd: 'cat progress.txt; echo "$KEPT"' })).output).toMatch(
        /^written by process \d+\nfrom the first process\n$/,
      )
      expect(client.canReusePreservedOwnedSession(state)).toBe(true)
      await client.delete(state)
      expect(await resumed.running()).toBe(false)
      // Gone for everyone: resuming again is refused, and the runtime would create afresh.
      const again = await new CordonSandboxClient(here)
        .resume(state)
        .catch((error: unknown) => error)
      expect(again).toBeInstanceOf(SandboxLifecycleError)
    } finally {
      await here.close()
      rmSync(store, { recursive: true, force: true })
    }
  }, 180_000)
})

describe('CordonSandboxClient: what cordon refuses, in the SDK’s error terms', () => {
  it('refuses manifest features it cannot honour before any sandbox is made', async () => {
    const client = new CordonSandboxClient(provider)
    // The run's other files may have sandboxes up meanwhile: only this provider's count.
    const made = async () =>
      (await provider.list()).filter(
        (info) => info.labels['cordon.provider'] === provider.instanceId,
      )
    const cases: Array<[string, () => Promise<unknown>]> = [
      [
        'git_repo',
        () => client.create({ manifest: { entries: { repo: { type: 'git_repo', repo: 'a/b' } } } }),
      ],
      ['users', () => client.create({ manifest: { users: [{ name: 'alice' }] } })],
      ['snapshot', () => client.create({ snapshot: { type: 'local' } })],
      ['option', () => client.create({ options: { image: 'python:3.14-slim' } })],
    ]
    for (const [name, attempt] of cases) {
      const error = await attempt().catch((caught: unknown) => caught)
      expect(error, name).toBeInstanceOf(SandboxUnsupportedFeatureError)
    }
    expect(await made()).toEqual([])
  })

  it('refuses a manifest root outside the sandbox’s writable root, and removes the sandbox', async () => {
    const defaultLayout = createDockerSandboxProvider({
      backend: containerTestBackend(),
      layout: EPHEMERAL_OUTPUTS,
    })
    try {
      const client = new CordonSandboxClient(defaultLayout)
      const error = await client.create().catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(SandboxConfigurationError)
      expect((error as Error).message).toContain('layout.outputs.containerPath')
      // A root under the writable root is made and used.
      const session = await client.create(new Manifest({ root: '/mnt/user-data/outputs/project' }))
      try {
        expect((await session.exec({ cmd: 'pwd' })).output).toBe('/mnt/user-data/outputs/project\n')
      } finally {
        await client.delete(session.state)
      }
    } finally {
      await defaultLayout.close()
    }
  })

  it('passes sandbox options to cordon, and a command killed at its timeout is the SDK’s timeout error', async () => {
    const client = new CordonSandboxClient(provider, { sandbox: { timeoutMs: 500 } })
    const session = await client.create()
    try {
      const error = await session.exec({ cmd: 'sleep 10' }).catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(SandboxExecTimeoutError)
      expect((await session.exec({ cmd: 'echo fast' })).output).toBe('fast\n')
    } finally {
      await client.delete(session.state)
    }
  })

  it('formats a cut output exactly as the SDK’s own truncateOutput does on what was printed', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create()
    try {
      const cmd = 'i=0; while [ $i -lt 200 ]; do echo "line-$i-xxxxxxxxxxxxxxxx"; i=$((i+1)); done'
      const printed = Array.from({ length: 200 }, (_, n) => `line-${n}-xxxxxxxxxxxxxxxx\n`).join('')
      for (const budget of [20, 50]) {
        const result = await session.exec({ cmd, maxOutputTokens: budget })
        const expected = truncateOutput(printed, budget)
        expect(result.output).toBe(expected.text)
        expect(result.originalTokenCount).toBe(expected.originalTokenCount)
      }
    } finally {
      await client.delete(session.state)
    }
  })

  it('keeps only a bounded head and tail of a large output, and tells the model it was cut', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create()
    try {
      const printed = 30 * 1024 * 1024
      const result = await session.exec({
        cmd: `head -c ${printed} /dev/zero | tr "\\0" a; echo; echo END`,
        maxOutputTokens: 100,
      })
      expect(result.exitCode).toBe(0)
      expect(result.output).toMatch(
        /^Total output lines: \d+\n\n\[\.\.\.\d+ characters truncated from process output\.\.\.\]\n/,
      )
      expect(result.output).toMatch(/\.\.\.\d+ tokens truncated\.\.\./)
      expect(result.output.endsWith('END\n')).toBe(true)
      expect(Buffer.byteLength(result.output)).toBeLessThan(1024)
      // The count is of everything printed, not of what was kept.
      expect(result.originalTokenCount).toBe(Math.ceil((printed + 5) / 4))
    } finally {
      await client.delete(session.state)
    }
  })

  it('refuses runAs, tty and paths outside the workspace; reports a missing file as the SDK does', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create()
    try {
      await expect(session.exec({ cmd: 'id', runAs: 'root' })).rejects.toBeInstanceOf(
        SandboxUnsupportedFeatureError,
      )
      await expect(session.exec({ cmd: 'true', tty: true })).rejects.toBeInstanceOf(
        SandboxUnsupportedFeatureError,
      )
      expect(session.supportsPty()).toBe(false)
      await expect(session.readFile({ path: '/etc/passwd' })).rejects.toBeInstanceOf(
        SandboxPathResolutionError,
      )
      await expect(session.readFile({ path: '../etc/passwd' })).rejects.toBeInstanceOf(
        SandboxPathResolutionError,
      )
      await expect(session.readFile({ path: 'missing.txt' })).rejects.toBeInstanceOf(
        SandboxWorkspaceReadNotFoundError,
      )
    } finally {
      await client.delete(session.state)
    }
  })
})

describe('CordonSandboxSession: files, listing and ports', () => {
  it('lists a directory with kinds, checks paths, and reads with a byte cap', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create({
      manifest: {
        entries: {
          'a.txt': { type: 'file', content: 'abcdef' },
          'tool.sh': { type: 'file', content: '#!/bin/sh\necho tool\n', permissions: 0o755 },
          sub: { type: 'dir', children: { 'b.txt': { type: 'file', content: 'b' } } },
        },
      },
    })
    try {
      const listed = await session.listDir({ path: '.' })
      expect(listed.map(({ name, type }) => `${type}:${name}`).sort()).toEqual([
        'dir:sub',
        'file:a.txt',
        'file:tool.sh',
      ])
      expect(await session.pathExists('sub/b.txt')).toBe(true)
      expect(await session.directoryExists('sub')).toBe(true)
      expect(await session.directoryExists('a.txt')).toBe(false)
      expect(Buffer.from(await session.readFile({ path: 'a.txt', maxBytes: 3 })).toString()).toBe(
        'abc',
      )
      // The mode is the entry's; the workspace (an ephemeral tmpfs) is noexec, so scripts run through sh.
      expect((await session.exec({ cmd: 'stat -c %a tool.sh; sh tool.sh' })).output).toBe(
        '755\ntool\n',
      )
    } finally {
      await client.delete(session.state)
    }
  })

  it('exposes a port through cordon’s port forwarding and records the endpoint', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create({
      manifest: {
        entries: {
          site: { type: 'dir', children: { 'index.html': { type: 'file', content: 'hi\n' } } },
        },
      },
    })
    try {
      await session.sandbox.start?.('httpd', [
        '-f',
        '-p',
        '127.0.0.1:8080',
        '-h',
        '/workspace/site',
      ])
      const endpoint = await session.resolveExposedPort(8080)
      expect(endpoint).toMatchObject({ host: '127.0.0.1', tls: false })
      expect(session.state.exposedPorts?.['8080']).toMatchObject({ port: endpoint.port })
      let body = ''
      await until(async () => {
        body = await fetch(`http://127.0.0.1:${endpoint.port}/index.html`).then(
          (response) => response.text(),
          () => '',
        )
        return body !== ''
      })
      expect(body).toBe('hi\n')
    } finally {
      await client.delete(session.state)
    }
  })
})

describe('CordonSandboxSession: the apply_patch editor', () => {
  it('creates exclusively (parents made), updates, moves and deletes with the SDK’s errors', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create()
    try {
      const editor = session.createEditor()
      await editor.createFile({ type: 'create_file', path: 'deep/dir/a.txt', diff: '+one\n+two\n' })
      await expect(
        editor.createFile({ type: 'create_file', path: 'deep/dir/a.txt', diff: '+again\n' }),
      ).rejects.toBeInstanceOf(SandboxApplyPatchPathError)
      await editor.updateFile({
        type: 'update_file',
        path: 'deep/dir/a.txt',
        diff: '@@\n one\n-two\n+2\n',
        moveTo: 'b.txt',
      })
      expect(await session.pathExists('deep/dir/a.txt')).toBe(false)
      expect(Buffer.from(await session.readFile({ path: 'b.txt' })).toString()).toBe('one\n2')
      await expect(
        editor.updateFile({ type: 'update_file', path: 'missing.txt', diff: '@@\n-x\n+y\n' }),
      ).rejects.toBeInstanceOf(SandboxApplyPatchFileNotFoundError)
      await editor.deleteFile({ type: 'delete_file', path: 'b.txt' })
      await expect(
        editor.deleteFile({ type: 'delete_file', path: 'b.txt' }),
      ).rejects.toBeInstanceOf(SandboxApplyPatchFileNotFoundError)
      await expect(
        editor.createFile({ type: 'create_file', path: '../escape.txt', diff: '+x\n' }),
      ).rejects.toBeInstanceOf(SandboxPathResolutionError)
    } finally {
      await client.delete(session.state)
    }
  })
})

describe('CordonSandboxClient: host files in the manifest', () => {
  it('writes local_file and local_dir entries from the host into the workspace, with their modes', async () => {
    const { mkdtemp, mkdir, writeFile, rm } = await import('node:fs/promises')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const hostDir = await mkdtemp(join(tmpdir(), 'cordon-openai-manifest-'))
    const client = new CordonSandboxClient(provider)
    try {
      await mkdir(join(hostDir, 'project/src'), { recursive: true })
      // A script stays executable: local entries keep the host file's mode.
      await writeFile(join(hostDir, 'project/src/main.sh'), '#!/bin/sh\necho main\n', {
        mode: 0o755,
      })
      await writeFile(join(hostDir, 'project/README'), 'readme\n')
      await writeFile(join(hostDir, 'single.txt'), 'single\n')
      const session = await client.create({
        manifest: {
          entries: {
            repo: { type: 'local_dir', src: join(hostDir, 'project') },
            'notes/single.txt': { type: 'local_file', src: join(hostDir, 'single.txt') },
          },
        },
      })
      try {
        const files = (await session.sandbox.listFiles('/workspace'))
          .map((file) => file.path)
          .sort()
        expect(files).toEqual([
          '/workspace/notes/single.txt',
          '/workspace/repo/README',
          '/workspace/repo/src/main.sh',
        ])
        expect(
          (
            await session.exec({
              cmd: './repo/src/main.sh; cat notes/single.txt; stat -c %a repo/src/main.sh repo/README',
            })
          ).output,
        ).toBe('main\nsingle\n755\n644\n')
      } finally {
        await client.delete(session.state)
      }
    } finally {
      await rm(hostDir, { recursive: true, force: true })
    }
  })
  it('gives a local_dir its permissions and its empty subdirectories', async () => {
    const { mkdtemp, mkdir, writeFile, rm } = await import('node:fs/promises')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const hostDir = await mkdtemp(join(tmpdir(), 'cordon-openai-local-dir-'))
    const client = new CordonSandboxClient(provider)
    try {
      await mkdir(join(hostDir, 'empty/nested'), { recursive: true })
      await mkdir(join(hostDir, 'full'))
      await writeFile(join(hostDir, 'full/f.txt'), 'f\n')
      const session = await client.create({
        manifest: {
          entries: { tree: { type: 'local_dir', src: hostDir, permissions: 0o750 } },
        },
      })
      try {
        expect(
          (
            await session.exec({
              cmd: 'stat -c %a tree; find tree -type d | sort; cat tree/full/f.txt',
            })
          ).output,
        ).toBe('750\ntree\ntree/empty\ntree/empty/nested\ntree/full\nf\n')
      } finally {
        await client.delete(session.state)
      }
    } finally {
      await rm(hostDir, { recursive: true, force: true })
    }
  })

  it('refuses a local_dir that holds a symbolic link, naming it, and copies nothing through it', async () => {
    const { mkdtemp, mkdir, writeFile, symlink, rm } = await import('node:fs/promises')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const hostDir = await mkdtemp(join(tmpdir(), 'cordon-openai-local-link-'))
    const client = new CordonSandboxClient(provider)
    try {
      await mkdir(join(hostDir, 'project'))
      await writeFile(join(hostDir, 'secret.txt'), 'host secret\n')
      await writeFile(join(hostDir, 'project/ok.txt'), 'ok\n')
      await symlink(join(hostDir, 'secret.txt'), join(hostDir, 'project/leak'))
      const error = await client
        .create({
          manifest: { entries: { repo: { type: 'local_dir', src: join(hostDir, 'project') } } },
        })
        .catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(SandboxUnsupportedFeatureError)
      expect((error as Error).message).toContain('symbolic link "leak"')
      expect((error as Error).message).toContain('/workspace/repo')

      // Added to a live session, it is refused before anything is written.
      const session = await client.create()
      try {
        await expect(
          session.materializeEntry({
            path: 'later',
            entry: { type: 'local_dir', src: join(hostDir, 'project') },
          }),
        ).rejects.toBeInstanceOf(SandboxUnsupportedFeatureError)
        expect(await session.pathExists('later')).toBe(false)
      } finally {
        await client.delete(session.state)
      }
    } finally {
      await rm(hostDir, { recursive: true, force: true })
    }
  })
})
