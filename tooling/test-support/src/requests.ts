import {
  type ContainerSandboxLayout,
  type CordonSandboxProvider,
  SANDBOX_DEFAULT_OUTPUTS_PATH,
  type SandboxBackendConfigBase,
  type SandboxBackendDefinition,
  type SandboxBackendOptions,
  type SandboxEvent,
  type SandboxId,
  type SandboxProviderConfigFor,
} from '@cordon/core'
import {
  composeProvider,
  DENY_ALL,
  newSandboxId,
  prepareProviderConfig,
  type SandboxBackendContext,
  type SandboxBackendFactory,
} from '@cordon/core/backend'
import { BUSYBOX_IMAGE, testRunLabels } from './test-run.js'

/** Outputs in a volume that lives and dies with the sandbox (the container tier's usual test layout). */
export const EPHEMERAL_OUTPUTS: ContainerSandboxLayout = {
  outputs: { source: { type: 'ephemeral' } },
}

/** Outputs in the image itself (ACI: a claimed group has no volume the host made). */
export const OUTPUTS_IN_IMAGE: ContainerSandboxLayout = { outputs: { source: { type: 'inImage' } } }

/**
 * A container-tier backend config on the busybox test image, labelled with
 * the run (a test's own labels are added to the run's, never replace it).
 * Typed by the caller's backend config, so it names no backend package.
 */
export function containerTestBackend<T extends object = Record<never, never>>(
  overrides: T = {} as T,
): { tier: 'container'; image: string } & T & { labels: Record<string, string> } {
  const own = (overrides as { readonly labels?: Readonly<Record<string, string>> }).labels
  return {
    tier: 'container',
    image: BUSYBOX_IMAGE,
    ...overrides,
    labels: { ...testRunLabels(), ...own },
  }
}

/**
 * What a provider hands a backend's `create()`, built by hand so a test
 * controls each request: a new sandbox id, deny-all, the default working
 * directory, and no limits unless given (as a provider passes only the
 * limits a host named; the backend applies its defaults).
 */
export function backendCreateRequest(
  overrides: Partial<SandboxBackendOptions> = {},
): SandboxBackendOptions & { readonly id: SandboxId } {
  const id = overrides.sandboxId ?? newSandboxId()
  return {
    id,
    sandboxId: id,
    env: {},
    workingDirectory: SANDBOX_DEFAULT_OUTPUTS_PATH,
    egress: DENY_ALL,
    ...overrides,
  }
}

/**
 * The context a provider gives a backend factory, for a backend used without
 * a provider: no layout, no brokered credentials, and every event it emits
 * collected in `events`.
 */
export function testBackendContext(overrides: Partial<SandboxBackendContext> = {}): {
  context: SandboxBackendContext
  events: SandboxEvent[]
} {
  const events: SandboxEvent[] = []
  const context: SandboxBackendContext = {
    providerId: 'prv_test',
    layout: undefined,
    brokeredCredentials: [],
    allowInwardFor: [],
    emit: (event) => events.push(event),
    ...overrides,
  }
  return { context, events }
}

/**
 * A provider over one backend factory, composed by core as the umbrella does
 * but without loading a package by name: how a backend's tests get a whole
 * provider (validation, defaults, events) around the backend under test.
 */
export function composeTestProvider<Config extends SandboxBackendConfigBase>(
  config: SandboxProviderConfigFor<Config>,
  definitions: readonly SandboxBackendDefinition<Config>[],
  createBackend: SandboxBackendFactory<Config>,
  onContext?: (context: SandboxBackendContext) => void,
): CordonSandboxProvider {
  const prepared = prepareProviderConfig(config, definitions)
  return composeProvider({
    ...prepared,
    loadBackend: async (context) => {
      onContext?.(context)
      return createBackend(prepared.config.backend, context)
    },
  })
}
