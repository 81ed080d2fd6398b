import type { CordonSandboxProvider } from '@cordon/core'

export interface SandboxConformanceOptions {
  /** Shown in the test names, e.g. `container:docker (runc)`. */
  readonly name: string
  /**
   * Makes a provider for the backend under test with the image or template the
   * suite needs: a POSIX userland (`sh`, `cat`, `sleep`, `ps`, `kill`, `head`,
   * `dd`, `wc`, `env`, `pwd`, `ls`, `printf`) and, for the network cases,
   * `nslookup`, `wget` and `nc`. The suite closes every provider it makes.
   *
   * What the suite proves and what it checks as a refusal is read from the
   * provider's own declaration, `provider.enforcement`: there is nothing
   * else to declare.
   */
  readonly createProvider: () => CordonSandboxProvider
  /** Budget of each case; sandbox creation included (default 60 s). */
  readonly timeoutMs?: number
}
