/**
 * The second process of scenario 13 (reconnect.ts): a host process that is
 * already running, as a web service's worker would be. For each line
 * `<runtime> <sandbox id>` on stdin it connects to that detached sandbox
 * (its credential from the default credential store, where the creating
 * process left it), runs `true`, lets go of it, and prints one JSON line:
 * `{ ms }`, from the start of `connect` to the exec's result, or `{ error }`.
 */
import { createInterface } from 'node:readline'
import type { CordonSandboxProvider } from '@cordon/core'
import { cordonProvider } from './cordon.js'

const providers = new Map<string, CordonSandboxProvider>()
for await (const line of createInterface({ input: process.stdin })) {
  const [runtime, id] = line.trim().split(' ') as ['runc' | 'runsc', string]
  try {
    let provider = providers.get(runtime)
    if (!provider) {
      provider = cordonProvider({ runtime })
      providers.set(runtime, provider)
    }
    const started = performance.now()
    const sandbox = await provider.connect(id)
    const result = await sandbox.exec('true')
    const ms = performance.now() - started
    if (result.exitCode !== 0) throw new Error(`true exited ${result.exitCode}`)
    await sandbox.disconnect()
    process.stdout.write(`${JSON.stringify({ ms })}\n`)
  } catch (error) {
    process.stdout.write(`${JSON.stringify({ error: String((error as Error)?.stack ?? error) })}\n`)
  }
}
for (const provider of providers.values()) await provider.close()
