import { execFile } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { HarnessCapabilityUnsupportedError } from '@ai-sdk/harness'
import { createDockerSandboxProvider } from '@cordon/backend-docker'
import {
  type CordonSandboxProvider,
  SANDBOX_MAX_OUTPUT_BYTES,
  SandboxFileNotFoundError,
} from '@cordon/core'
import { containerTestBackend, EPHEMERAL_OUTPUTS, until } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type CordonHarnessSession,
  CordonHarnessSessionExistsError,
  createCordonHarnessSandbox,
} from '../src/index.js'
import { testProvider } from './test-run.js'

/** The host as a container on the default bridge reaches it. */
const HOST_BRIDGE_ADDRESS = '172.17.0.1'

const provider = testProvider()
afterAll(async () => {
  await provider.close()
})

async function withSession(
  run: (session: CordonHarnessSession) => Promise<void>,
  harness = createCordonHarnessSandbox(provider),
): Promise<void> {
  // Typed as cordon's session: `session.sandbox` needs no cast.
  const session = await harness.createSession()
  try {
    await run(session)
  } finally {
    await session.destroy()
  }
}

describe('CordonHarnessSession: files and processes', () => {
  it('streams files both ways, reports a missing file as null, and reads line ranges', async () => {
    await withSession(async (session) => {
      const bytes = new Uint8Array(300_000).map((_, index) => index % 251)
      await session.writeFile({
        path: 'big.bin',
        content: new Response(bytes).body as ReadableStream<Uint8Array>,
      })
      const stream = await session.readFile({ path: 'big.bin' })
      expect(new Uint8Array(await new Response(stream).arrayBuffer())).toEqual(bytes)
      expect(await session.readFile({ path: 'missing.bin' })).toBeNull()
      expect(await session.readBinaryFile({ path: 'missing.bin' })).toBeNull()
      expect(await session.readTextFile({ path: 'missing.txt' })).toBeNull()

      await session.writeTextFile({ path: 'latin.txt', content: 'café\nb\nc', encoding: 'latin1' })
      expect(await session.readBinaryFile({ path: 'latin.txt' })).toEqual(
        new Uint8Array([0x63, 0x61, 0x66, 0xe9, 0x0a, 0x62, 0x0a, 0x63]),
      )
      expect(
        await session.readTextFile({
          path: 'latin.txt',
          encoding: 'latin1',
          startLine: 1,
          endLine: 1,
        }),
      ).toBe('café\n')
      expect(
        await session.readTextFile({
          path: 'latin.txt',
          encoding: 'latin1',
          startLine: 3,
          endLine: 99,
        }),
      ).toBe('c')
      await expect(
        session.writeTextFile({ path: 'x.txt', content: 'x', encoding: 'ebcdic' }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
    })
  })

  it('runs and spawns with a working directory and environment; abort kills and rejects', async () => {
    await withSession(async (session) => {
      expect(session.defaultWorkingDirectory).toBe(session.sandbox.rootDir)
      await session.run({ command: 'mkdir -p sub' })
      expect(
        await session.run({
          command: 'pwd; echo "$WHO"',
          workingDirectory: 'sub',
          env: { WHO: 'me' },
        }),
      ).toEqual({
        exitCode: 0,
        stdout: `${session.defaultWorkingDirectory}/sub\nme\n`,
        stderr: '',
      })
      const controller = new AbortController()
      const running = await session.spawn({
        command: 'echo started; sleep 30',
        abortSignal: controller.signal,
      })
      const reader = running.stdout.getReader()
      expect(new TextDecoder().decode((await reader.read()).value)).toBe('started\n')
      const reason = new Error('stop now')
      controller.abort(reason)
      await expect(running.wait()).rejects.toBe(reason)

      const killed = await session.spawn({ command: 'sleep 30' })
      await killed.kill()
      await killed.kill()
      expect((await killed.wait()).exitCode).not.toBe(0)
    })
  })

  it('spawn streams the bytes a command wrote unchanged, every byte value 0..255 included', async () => {
    await withSession(async (session) => {
      const every = Uint8Array.from({ length: 256 }, (_, index) => index)
      // printf's octal escapes write each byte value, NUL and 0x80-0xff included.
      const escapes = [...every].map((byte) => `\\${byte.toString(8).padStart(3, '0')}`).join('')
      const spawned = await session.spawn({
        command: `printf '${escapes}'; printf '${escapes}' >&2`,
      })
      const [stdout, stderr] = await Promise.all([
        new Response(spawned.stdout).arrayBuffer(),
        new Response(spawned.stderr).arrayBuffer(),
      ])
      expect((await spawned.wait()).exitCode).toBe(0)
      expect(new Uint8Array(stdout)).toEqual(every)
      expect(new Uint8Array(stderr)).toEqual(every)
    })
  })

  it('run returns its output as text decoded as UTF-8: characters whole, a byte that is not UTF-8 as U+FFFD', async () => {
    await withSession(async (session) => {
      // é and € as their UTF-8 bytes, then 0xff, which no UTF-8 text has.
      const result = await session.run({
        command: "printf 'caf\\303\\251 \\342\\202\\254 \\377'; printf '\\377' >&2",
      })
      expect(result.exitCode).toBe(0)
      expect(result.stdout).toBe('café € \uFFFD')
      expect(result.stderr).toBe('\uFFFD')
    })
  })

  it('refuses a read of a directory, naming it, rather than answering null as for a missing file', async () => {
    await withSession(async (session) => {
      await session.run({ command: 'mkdir -p sub/dir' })
      for (const read of [session.readTextFile, session.readBinaryFile, session.readFile]) {
        const error = await read({ path: 'sub/dir' }).catch((caught: unknown) => caught)
        expect(SandboxFileNotFoundError.isInstance(error)).toBe(true)
        expect((error as Error).message).toContain('sub/dir')
        expect((error as Error).message).toContain('is a directory')
        expect(await read({ path: 'sub/missing' })).toBeNull()
      }
    })
  })

  it('says on stderr why cordon ended a command that outlived the exec timeout', async () => {
    const harness = createCordonHarnessSandbox(provider, { sandbox: { timeoutMs: 500 } })
    await withSession(async (session) => {
      const result = await session.run({ command: 'echo started; sleep 10' })
      expect(result.exitCode).toBe(137)
      expect(result.stdout).toBe('started\n')
      expect(result.stderr).toMatch(
        /^cordon: the command was killed when it reached the sandbox's exec timeout \(\d+ ms\)\n$/,
      )
    }, harness)
  })

  it('says on stderr that cordon cut a stream at its output cap', async () => {
    await withSession(async (session) => {
      const result = await session.run({
        command: 'head -c 12000000 /dev/zero | tr "\\0" a; echo err >&2',
      })
      expect(result.exitCode).toBe(0)
      expect(result.stdout.length).toBe(SANDBOX_MAX_OUTPUT_BYTES)
      expect(result.stderr).toBe(
        `err\ncordon: stdout was cut at the sandbox's output cap; only its first ${SANDBOX_MAX_OUTPUT_BYTES} bytes are shown\n`,
      )
    })
  })

  it('restricted() exposes files and processes only, on the same sandbox', async () => {
    await withSession(async (session) => {
      const view = session.restricted()
      expect(Object.keys(view).sort()).toEqual(
        [
          'description',
          'readBinaryFile',
          'readFile',
          'readTextFile',
          'run',
          'spawn',
          'writeBinaryFile',
          'writeFile',
          'writeTextFile',
        ].sort(),
      )
      await view.writeTextFile({ path: 'shared.txt', content: 'same sandbox' })
      expect((await session.sandbox.readFile('shared.txt')).toString()).toBe('same sandbox')
    })
  })
})

describe('CordonHarnessSession: ports', () => {
  it('forwards exposed ports, replaces them with setPorts, and refuses what it cannot do', async () => {
    const harness = createCordonHarnessSandbox(provider, { ports: [8080] })
    await withSession(async (session) => {
      expect(session.ports).toEqual([8080])
      await session.run({ command: 'mkdir -p site && echo "hello from inside" > site/index.html' })
      await session.sandbox.start?.('httpd', [
        '-f',
        '-p',
        '127.0.0.1:8080',
        '-h',
        `${session.defaultWorkingDirectory}/site`,
      ])
      const endpoint = await session.getPortEndpoint({ port: 8080 })
      expect(endpoint.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
      expect(await session.getPortUrl({ port: 8080, protocol: 'ws' })).toBe(
        endpoint.url.replace('http:', 'ws:'),
      )
      let body = ''
      await until(async () => {
        body = await fetch(`${endpoint.url}/index.html`).then(
          (response) => response.text(),
          () => '',
        )
        return body !== ''
      })
      expect(body).toBe('hello from inside\n')

      await expect(
        session.getPortEndpoint({ port: 8080, protocol: 'https' }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
      await expect(session.getPortEndpoint({ port: 9090 })).rejects.toBeInstanceOf(
        HarnessCapabilityUnsupportedError,
      )
      await session.setPorts([9090])
      expect(session.ports).toEqual([9090])
      // The old forward is closed: its host port no longer answers.
      await expect(fetch(`${endpoint.url}/index.html`)).rejects.toThrow()
      await expect(session.getPortEndpoint({ port: 8080 })).rejects.toBeInstanceOf(
        HarnessCapabilityUnsupportedError,
      )
    }, harness)
  })
})

describe('CordonHarnessSession: network policy through cordon’s enforced egress', () => {
  let server: Server
  let port: number
  let egressProvider: CordonSandboxProvider

  beforeAll(async () => {
    server = createServer((request, response) => response.end(`upstream saw ${request.url}\n`))
    port = await new Promise<number>((resolve) =>
      server.listen(0, '0.0.0.0', () => resolve((server.address() as AddressInfo).port)),
    )
    egressProvider = createDockerSandboxProvider({
      backend: containerTestBackend({
        gatewayHosts: { 'upstream.test': HOST_BRIDGE_ADDRESS },
        gatewayAllowedPorts: [port],
      }),
      layout: EPHEMERAL_OUTPUTS,
      allowInwardFor: ['upstream.test'],
    })
  })
  afterAll(async () => {
    await egressProvider?.close()
    server?.close()
  })

  it('custom allowedHosts and deny-all change what the sandbox reaches', async () => {
    const harness = createCordonHarnessSandbox(egressProvider, {
      sandbox: { egress: { kind: 'static', allowedHosts: [] } },
    })
    await withSession(async (session) => {
      const fetchUpstream = (path: string) =>
        session.run({ command: `wget -q -O - http://upstream.test:${port}${path} 2>&1` })
      expect((await fetchUpstream('/before')).stdout).toContain('403')
      await session.setNetworkPolicy({ mode: 'custom', allowedHosts: ['upstream.test'] })
      expect((await fetchUpstream('/after')).stdout).toBe('upstream saw /after\n')
      await session.setNetworkPolicy({ mode: 'deny-all' })
      expect((await fetchUpstream('/again')).stdout).toContain('403')
    }, harness)
  })

  it('refuses allow-all and CIDR rules with the harness’s capability error', async () => {
    const harness = createCordonHarnessSandbox(egressProvider, {
      sandbox: { egress: { kind: 'static', allowedHosts: [] } },
    })
    await withSession(async (session) => {
      await expect(session.setNetworkPolicy({ mode: 'allow-all' })).rejects.toBeInstanceOf(
        HarnessCapabilityUnsupportedError,
      )
      await expect(
        session.setNetworkPolicy({ mode: 'custom', allowedCIDRs: ['10.0.0.0/8'] }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
      await expect(
        session.setNetworkPolicy({
          mode: 'custom',
          allowedHosts: ['a.test'],
          deniedCIDRs: ['169.254.169.254/32'],
        }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
    }, harness)
  })

  it('on a deny-all sandbox (no gateway at all), deny-all holds and anything else is refused', async () => {
    await withSession(async (session) => {
      await session.setNetworkPolicy({ mode: 'deny-all' })
      await expect(
        session.setNetworkPolicy({ mode: 'custom', allowedHosts: ['upstream.test'] }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
    })
  })
})

describe('createCordonHarnessSandbox: sessions and resume', () => {
  it('resumes a live session by its sessionId; refuses an unknown or destroyed one', async () => {
    const harness = createCordonHarnessSandbox(provider)
    expect(harness.specificationVersion).toBe('harness-sandbox-v1')
    const session = (await harness.createSession({ sessionId: 'task-7' })) as CordonHarnessSession
    expect(session.id).toBe('task-7')
    try {
      expect(await harness.resumeSession!({ sessionId: 'task-7' })).toBe(session)
      // Another provider instance stands for another process.
      await expect(
        createCordonHarnessSandbox(provider).resumeSession!({ sessionId: 'task-7' }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
    } finally {
      await session.stop()
      await session.stop()
    }
    await expect(harness.resumeSession!({ sessionId: 'task-7' })).rejects.toBeInstanceOf(
      HarnessCapabilityUnsupportedError,
    )
    expect(session.sandbox.status).toBe('destroyed')
  })

  it('refuses a second createSession with a live session’s id, before making a sandbox', async () => {
    let created = 0
    const counting: CordonSandboxProvider = Object.assign(Object.create(provider), {
      create: (config?: Parameters<CordonSandboxProvider['create']>[0]) => {
        created += 1
        return provider.create(config)
      },
    })
    const harness = createCordonHarnessSandbox(counting)
    const [first, second] = await Promise.allSettled([
      harness.createSession({ sessionId: 'task-9' }),
      harness.createSession({ sessionId: 'task-9' }),
    ])
    expect(first.status).toBe('fulfilled')
    expect(second.status === 'rejected' && second.reason).toBeInstanceOf(
      CordonHarnessSessionExistsError,
    )
    const session = (first as PromiseFulfilledResult<CordonHarnessSession>).value
    try {
      await expect(harness.createSession({ sessionId: 'task-9' })).rejects.toBeInstanceOf(
        CordonHarnessSessionExistsError,
      )
      expect(created).toBe(1)
    } finally {
      await session.stop()
    }
    // Once stopped, the id is free again.
    const again = await harness.createSession({ sessionId: 'task-9' })
    await (again as CordonHarnessSession).stop()
    expect(created).toBe(2)
  })

  it('resumes by its session id, in this process, a detached session another process created, and stops it', async () => {
    const store = mkdtempSync(join(tmpdir(), 'cordon-harness-credentials-'))
    const sessions = mkdtempSync(join(tmpdir(), 'cordon-harness-sessions-'))
    const here = createDockerSandboxProvider({
      backend: containerTestBackend(),
      layout: EPHEMERAL_OUTPUTS,
      credentialStore: store,
    })
    try {
      const sessionId = `task-${process.pid}`
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [fileURLToPath(new URL('./fixtures/detached-session.mjs', import.meta.url))],
        {
          env: {
            ...process.env,
            CORDON_TEST_STORE: store,
            CORDON_TEST_SESSIONS: sessions,
            CORDON_TEST_SESSION: sessionId,
          },
          timeout: 120_000,
        },
      )
      expect(stdout.trim()).toBe(sessionId)
      // The first process has exited; the session id is all this one is told.
      const harness = createCordonHarnessSandbox(here, { sessionDirectory: sessions })
      const resumed = (await harness.resumeSession!({ sessionId })) as CordonHarnessSession
      expect(resumed.id).toBe(sessionId)
      expect((await resumed.run({ command: 'cat progress.txt' })).stdout).toBe(
        'left by the first process\n',
      )
      expect(await harness.resumeSession!({ sessionId })).toBe(resumed)
      await resumed.stop()
      expect(resumed.sandbox.status).toBe('destroyed')
      // Stopped for everyone: nothing is recorded, and resuming is refused.
      expect(readdirSync(sessions)).toEqual([])
      expect(existsSync(join(store, `${resumed.sandbox.id}.json`))).toBe(false)
      await expect(
        createCordonHarnessSandbox(here, { sessionDirectory: sessions }).resumeSession!({
          sessionId,
        }),
      ).rejects.toBeInstanceOf(HarnessCapabilityUnsupportedError)
    } finally {
      await here.close()
      rmSync(store, { recursive: true, force: true })
      rmSync(sessions, { recursive: true, force: true })
    }
  }, 180_000)

  it('runs onFirstCreate on the fresh sandbox, and removes the sandbox when it fails', async () => {
    const harness = createCordonHarnessSandbox(provider)
    let seenId = ''
    const session = (await harness.createSession({
      identity: 'recipe-1',
      onFirstCreate: async (view) => {
        seenId = (await view.run({ command: 'echo prepared > marker; echo ok' })).stdout
      },
    })) as CordonHarnessSession
    try {
      expect(seenId).toBe('ok\n')
      expect(await session.readTextFile({ path: 'marker' })).toBe('prepared\n')
    } finally {
      await session.destroy()
    }
    const failure = new Error('bootstrap failed')
    await expect(
      harness.createSession({
        onFirstCreate: async () => {
          throw failure
        },
      }),
    ).rejects.toBe(failure)
  })

  it('honours an aborted signal before creating anything', async () => {
    const controller = new AbortController()
    controller.abort(new Error('cancelled'))
    await expect(
      createCordonHarnessSandbox(provider).createSession({ abortSignal: controller.signal }),
    ).rejects.toThrow('cancelled')
  })
})
