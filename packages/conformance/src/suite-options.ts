import type { CordonSandboxProvider } from '@cordon/core'
import type { SandboxConformanceCapabilities } from './capabilities.js'

export interface SandboxConformanceOptions {
  /** Shown in the test names, e.g. `container:docker (runc)`. */
  readonly name: string
  /**
   * Makes a provider for the backend under test with the image or template the
   * suite needs: a POSIX userland (`sh`, `cat`, `sleep`, `ps`, `kill`, `head`,
   * `dd`, `wc`, `env`, `pwd`, `ls`, `printf`) and, for the network cases,
   * `nslookup`, `wget` and `nc`. The suite closes every provider it makes.
   */
  readonly createProvider: () => CordonSandboxProvider
  readonly capabilities: SandboxConformanceCapabilities
  /** Budget of each case; sandbox creation included (default 60 s). */
  readonly timeoutMs?: number
}
