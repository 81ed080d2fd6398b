import type { SandboxEvent } from '@cordon/core'
import { createSandboxProvider } from '../create-sandbox-provider.js'
import { parseFlags } from './command-line.js'
import { hostBridgeAddress, startDemoUpstream } from './demo-upstream.js'
import { loadDockerBackend } from './docker-backend-module.js'
import { registryAuthForImage } from './docker-cli-credentials.js'
import { prepareEngine } from './engine-prepare.js'
import { imagePullReporter } from './image-pull-report.js'
import type { RunIo } from './run-command.js'
import { DEFAULT_IMAGE, runtimeFlag } from './sandbox-flags.js'

export const DEMO_USAGE = `usage: cordon demo [--image IMAGE] [--runtime docker|runc|runsc]

Shows cordon's main job step by step, with the time of each: a hardened
sandbox runs a command, a file goes in and comes back, the network is tried
and refused; then a second sandbox reaches one allowed host through the
egress gateway and is refused everything else, and the gateway's decisions
are printed.`

/**
 * `cordon demo`: cordon's main job in one go. A hardened sandbox runs a
 * command, a file goes in and comes back out, the network is tried and
 * refused; then a second sandbox reaches one allowed host through the egress
 * gateway and is refused everything else, and the gateway's decisions are
 * printed. Each step is printed with its time.
 */
export async function demoCommand(
  argv: readonly string[],
  io: RunIo,
  signal: AbortSignal,
): Promise<number> {
  const values = parseFlags(
    'demo',
    argv,
    {
      image: { type: 'string', default: process.env.CORDON_IMAGE ?? DEFAULT_IMAGE },
      runtime: { type: 'string', default: 'docker' },
      help: { type: 'boolean', short: 'h' },
    },
    false,
  )
  const runtime = runtimeFlag(values.runtime)
  // The engine is asked first through the backend, so that one that cannot
  // be reached is reported as such, before the demo starts anything.
  const registryAuth = await registryAuthForImage(values.image)
  await prepareEngine(values.image, registryAuth, {
    signal,
    onEvent: imagePullReporter(io.stderr, io.terminal?.stderr === true),
  })
  const { docker: engine } = (await loadDockerBackend()).connectEngine({})
  const upstreamAddress = await hostBridgeAddress(engine as Parameters<typeof hostBridgeAddress>[0])
  const upstream = await startDemoUpstream()
  const events: SandboxEvent[] = []
  const provider = createSandboxProvider({
    backend: {
      tier: 'container',
      runtime,
      image: values.image,
      ...(registryAuth ? { registryAuth } : {}),
      gatewayHosts: { 'demo.upstream': upstreamAddress },
      gatewayAllowedPorts: [upstream.port],
    },
    layout: { outputs: { source: { type: 'ephemeral' } } },
    // The demo's upstream lives on the host, a private address the gateway refuses unless exempted by name.
    allowInwardFor: ['demo.upstream'],
    onEvent: (event) => events.push(event),
  })
  const step = async <T>(label: string, run: () => Promise<T>): Promise<T> => {
    const started = performance.now()
    const value = await run()
    io.stdout(`  ${label} (${Math.round(performance.now() - started)} ms)\n`)
    return value
  }
  try {
    io.stdout(`cordon demo: ${provider.name}, image ${values.image}\n`)
    const sandbox = await step('created a hardened sandbox, ready to run commands', () =>
      provider.create({ memoryLimitMb: 128, maxProcesses: 64, signal }),
    )
    io.stdout(`    id ${sandbox.id}, outputs at ${sandbox.rootDir}\n`)

    const who = await step('ran `id`', () => sandbox.exec('id', [], { signal }))
    io.stdout(`    ${who.stdout.trim()} (exit ${who.exitCode})\n`)

    await step('wrote notes/hello.txt through the file API', () =>
      sandbox.writeFile('notes/hello.txt', 'hello from the host\n', { signal }),
    )
    const upper = await step('ran a command that reads it and writes a result', () =>
      sandbox.exec(
        'sh',
        ['-c', 'tr a-z A-Z < notes/hello.txt > notes/shout.txt && wc -c < notes/shout.txt'],
        { signal },
      ),
    )
    io.stdout(`    the command wrote ${upper.stdout.trim()} bytes\n`)
    const back = await step('read notes/shout.txt back', () =>
      sandbox.readFile('notes/shout.txt', { signal }),
    )
    io.stdout(`    ${new TextDecoder().decode(back).trim()}\n`)
    const files = await sandbox.listFiles(undefined, { signal })
    io.stdout(`    files: ${files.map((file) => `${file.path} (${file.size} B)`).join(', ')}\n`)

    const network = await step(
      'under deny-all, tried the network (DNS lookup, then TCP to 1.1.1.1:443)',
      () =>
        sandbox.exec(
          'sh',
          [
            '-c',
            'nslookup example.com 2>&1 | grep . | tail -1; nc -w 2 1.1.1.1 443 </dev/null 2>&1 || echo "connect failed (exit $?)"',
          ],
          { timeout: 15_000, signal },
        ),
    )
    io.stdout(`    ${network.stdout.trim().split('\n').join('\n    ')}\n`)
    io.stdout(
      '    egress decision: DENY (policy deny-all: the sandbox has no network interface but loopback)\n',
    )

    await step('destroyed the sandbox', () => sandbox.destroy())

    const proxied = await step(
      'created a sandbox whose egress allows only demo.upstream (through the gateway)',
      () =>
        provider.create({ egress: { kind: 'static', allowedHosts: ['demo.upstream'] }, signal }),
    )
    const allowed = await step('fetched http://demo.upstream/ through HTTP_PROXY', () =>
      proxied.exec('wget', ['-q', '-O', '-', `http://demo.upstream:${upstream.port}/`], {
        timeout: 15_000,
        signal,
      }),
    )
    io.stdout(`    ${allowed.stdout.trim() || allowed.stderr.trim()}\n`)
    const denied = await step('tried http://example.com/ (not on the list)', () =>
      proxied.exec('wget', ['-q', '-O', '-', 'http://example.com/'], { timeout: 15_000, signal }),
    )
    io.stdout(`    ${denied.stderr.trim()}\n`)
    const direct = await step(
      `tried the host directly (${upstreamAddress}:${upstream.port}, no proxy)`,
      () =>
        proxied.exec('nc', ['-w', '2', upstreamAddress, String(upstream.port)], {
          stdin: 'GET / HTTP/1.0\r\n\r\n',
          timeout: 15_000,
          signal,
        }),
    )
    io.stdout(`    ${direct.stderr.trim()}\n`)
    await proxied.destroy()
    await new Promise((resolve) => setTimeout(resolve, 200))
    for (const event of events) {
      if (event.type !== 'egress') continue
      io.stdout(
        `    egress decision: ${event.decision.toUpperCase()} ${event.host}:${event.port} (${event.reason})\n`,
      )
    }
    const phases = events.flatMap((event) =>
      event.type === 'lifecycle'
        ? [`${event.phase}${event.durationMs ? ` ${Math.round(event.durationMs)} ms` : ''}`]
        : [],
    )
    io.stdout(`  lifecycle events: ${phases.join(', ')}\n`)
    return 0
  } finally {
    await provider.close()
    await upstream.close()
  }
}
