import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

export {
  AGENT_ENV,
  type AgentConfig,
  AgentConfigError,
  type AgentListenAddress,
  readAgentConfig,
} from './agent-config.js'
export { AGENT_VERSION } from './agent-connection.js'
export { type RunningAgent, startAgent } from './agent-server.js'
export type { CodeCacheUse } from './code-cache-use.js'
export { EXEC_MARKER_VARIABLE } from './process-tree.js'

/**
 * Absolute path of the bundled agent program, the file to copy or mount into
 * a guest image and run with `node`: `dist/cordon-agent.mjs` (an ES module),
 * or with `'cjs'` `dist/cordon-agent.cjs`, the same program as CommonJS,
 * which starts sooner: no ES module loader (keep its `.cjs` name in the guest).
 */
export function agentProgramPath(format: 'esm' | 'cjs' = 'esm'): string {
  return fileURLToPath(
    new URL(format === 'cjs' ? './cordon-agent.cjs' : './cordon-agent.mjs', import.meta.url),
  )
}

/**
 * Absolute path of the agent's loader, `dist/cordon-agent-loader.cjs`: `node
 * <loader> <agent.cjs>` starts the CommonJS program from a V8 code cache
 * beside it (`<agent.cjs>.cache`, made by `makeAgentCodeCache` from
 * `@cordon/agent/sandbox`), and from source when there is none or V8 refuses
 * it. Copy it into the guest beside the program.
 */
export function agentLoaderPath(): string {
  return fileURLToPath(new URL('./cordon-agent-loader.cjs', import.meta.url))
}

/**
 * Absolute path of cordon-launcher built for `arch` (Node's names: `x64`,
 * `arm64`), the program the agent starts commands through when
 * `CORDON_AGENT_LAUNCHER` names it; undefined when this package holds no
 * build for that architecture.
 */
export function launcherProgramPath(arch: string = process.arch): string | undefined {
  const path = fileURLToPath(new URL(`./launcher/linux-${arch}/cordon-launcher`, import.meta.url))
  return existsSync(path) ? path : undefined
}

/**
 * Absolute path of cordon-startup-clock.so built for `arch` (`launcher/startup-clock.c`):
 * preloaded into the agent's Node (`ld.so --preload`) in a gVisor sandbox, it
 * answers most of Node's clock reads of the sandbox's first second without a
 * system call. Built for x64 only; undefined where this package holds no build.
 */
export function startupClockLibraryPath(arch: string = process.arch): string | undefined {
  const path = fileURLToPath(
    new URL(`./launcher/linux-${arch}/cordon-startup-clock.so`, import.meta.url),
  )
  return existsSync(path) ? path : undefined
}
