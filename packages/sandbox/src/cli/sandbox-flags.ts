import type { SandboxProviderConfig } from '@cordon/core'

export const DEFAULT_IMAGE = 'cordon-test/busybox:latest'

/**
 * The flags every command that makes one sandbox takes (`run`, `shell`), in
 * `util.parseArgs` form, and the provider config they describe. An argv is
 * split at `--`: flags before it, the sandbox's command after it.
 */
export const SANDBOX_FLAG_OPTIONS = {
  image: { type: 'string', default: process.env.CORDON_IMAGE ?? DEFAULT_IMAGE },
  runtime: { type: 'string', default: 'docker' },
  memory: { type: 'string' },
  outputs: { type: 'string' },
} as const

export function splitAtSeparator(argv: readonly string[]): {
  flags: string[]
  command: string[]
} {
  const separator = argv.indexOf('--')
  return {
    flags: [...(separator >= 0 ? argv.slice(0, separator) : argv)],
    command: separator >= 0 ? argv.slice(separator + 1) : [],
  }
}

export function providerConfigFromFlags(values: {
  readonly image: string
  readonly runtime: string
  readonly outputs?: string | undefined
}): SandboxProviderConfig {
  return {
    backend: {
      tier: 'container',
      // Checked by the provider's config validation, which names a bad value.
      runtime: values.runtime as 'docker' | 'runsc',
      image: values.image,
    },
    layout: {
      outputs: {
        source: values.outputs
          ? { type: 'hostDir', hostPath: values.outputs }
          : { type: 'ephemeral' },
      },
    },
  }
}
