import { parseArgs } from 'node:util'
import type { SandboxEvent, SandboxProviderConfig } from '@cordon/core'
import { createSandboxProvider } from '../create-sandbox-provider.js'
import { DEFAULT_IMAGE, type RunIo } from './run-command.js'

/**
 * `cordon demo`: cordon's main job in one go. A hardened sandbox runs a
 * command, a file goes in and comes back out, the network is tried and
 * refused, and the sandbox is destroyed; each step is printed with its time.
 */
export async function demoCommand(argv: readonly string[], io: RunIo): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      image: { type: 'string', default: process.env.CORDON_IMAGE ?? DEFAULT_IMAGE },
      runtime: { type: 'string', default: 'docker' },
    },
  })
  const events: SandboxEvent[] = []
  const provider = createSandboxProvider({
    backend: { tier: 'container', runtime: values.runtime, image: values.image },
    layout: { outputs: { source: { kind: 'ephemeral' } } },
    onEvent: (event) => events.push(event),
  } as SandboxProviderConfig)
  const step = async <T>(label: string, run: () => Promise<T>): Promise<T> => {
    const started = performance.now()
    const value = await run()
    io.stdout(`  ${label} (${Math.round(performance.now() - started)} ms)\n`)
    return value
  }
  try {
    io.stdout(`cordon demo: ${provider.name}, image ${values.image}\n`)
    const sandbox = await step('created a hardened sandbox, ready to run commands', () =>
      provider.create({ memoryLimitMb: 128, maxProcesses: 64 }),
    )
    io.stdout(`    id ${sandbox.id}, outputs at ${sandbox.rootDir}\n`)

    const who = await step('ran `id`', () => sandbox.exec('id'))
    io.stdout(`    ${who.stdout.trim()} (exit ${who.exitCode})\n`)

    await step('wrote notes/hello.txt through the file API', () =>
      sandbox.writeFile('notes/hello.txt', 'hello from the host\n'),
    )
    const upper = await step('ran a command that reads it and writes a result', () =>
      sandbox.exec('sh', [
        '-c',
        'tr a-z A-Z < notes/hello.txt > notes/shout.txt && wc -c < notes/shout.txt',
      ]),
    )
    io.stdout(`    the command wrote ${upper.stdout.trim()} bytes\n`)
    const back = await step('read notes/shout.txt back', () => sandbox.readFile('notes/shout.txt'))
    io.stdout(`    ${new TextDecoder().decode(back).trim()}\n`)
    const files = await sandbox.listFiles()
    io.stdout(`    files: ${files.map((file) => `${file.path} (${file.size} B)`).join(', ')}\n`)

    const network = await step('tried the network (DNS lookup, then TCP to 1.1.1.1:443)', () =>
      sandbox.exec(
        'sh',
        [
          '-c',
          'nslookup example.com 2>&1 | grep . | tail -1; nc -w 2 1.1.1.1 443 </dev/null 2>&1 || echo "connect failed (exit $?)"',
        ],
        {
          timeout: 15_000,
        },
      ),
    )
    io.stdout(`    ${network.stdout.trim().split('\n').join('\n    ')}\n`)
    io.stdout(
      '    egress decision: DENY (policy deny-all: the sandbox has no network interface but loopback)\n',
    )

    await step('destroyed the sandbox', () => sandbox.destroy())
    const phases = events.flatMap((event) =>
      event.type === 'lifecycle'
        ? [`${event.phase}${event.durationMs ? ` ${Math.round(event.durationMs)} ms` : ''}`]
        : [],
    )
    io.stdout(`  lifecycle events: ${phases.join(', ')}\n`)
    return 0
  } finally {
    await provider.close()
  }
}
