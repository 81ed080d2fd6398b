import type { ACIStandbyPoolBackendConfig } from '@cordon/builtin-backends'
import {
  resolveLayout,
  type SandboxBackendOptions,
  type SandboxEvent,
  type SandboxId,
} from '@cordon/core'
import type { CordonSandboxBackend, SandboxBackendContext } from '@cordon/core/backend'
import {
  backendCreateRequest,
  OUTPUTS_IN_IMAGE,
  type TestArmStandin,
  testBackendContext,
} from '@cordon/test-support'
import { createAciStandbyPoolBackend } from '../src/index.js'
import { backendConfig } from './standin-fixture.js'

/** A backend used without a provider, so a test controls each request and sees every event. */
export function testBackend(
  standin: TestArmStandin,
  overrides: Partial<ACIStandbyPoolBackendConfig> = {},
  context: Partial<SandboxBackendContext> = {},
): { backend: CordonSandboxBackend; events: SandboxEvent[] } {
  const test = testBackendContext({
    providerId: 'prv_acitest',
    layout: resolveLayout(OUTPUTS_IN_IMAGE),
    ...context,
  })
  const backend = createAciStandbyPoolBackend(backendConfig(standin, overrides), test.context)
  return { backend, events: test.events }
}

/** A create request with deny-all and no limits (a claim cannot set any: the profile's hold). */
export function createRequest(
  _standin: TestArmStandin,
  overrides: Partial<SandboxBackendOptions> = {},
): SandboxBackendOptions & { readonly id: SandboxId } {
  return backendCreateRequest(overrides)
}

/** The requests the stand-in served after `mark` (an earlier `requests().length`). */
export function requestsSince(
  standin: TestArmStandin,
  mark: number,
): Array<{ method: string; path: string; status: number }> {
  return standin.requests().slice(mark)
}

/** A request line such as `PUT containerGroups 201`, short enough to compare in a test. */
export function describeRequest(request: { method: string; path: string; status: number }): string {
  const kind =
    /\/(containerGroups|containerGroupProfiles|operations|operationResults|runtimeViews|subnets|networkSecurityGroups)\b/i.exec(
      request.path,
    )?.[1] ?? request.path
  return `${request.method} ${kind} ${request.status}`
}

/** Resolves once the stand-in has no container group left (deletes run in the background). */
export async function groupsGone(standin: TestArmStandin, withinMs = 10_000): Promise<string[]> {
  const until = Date.now() + withinMs
  while (standin.groups().length > 0 && Date.now() < until)
    await new Promise((resolve) => setTimeout(resolve, 50))
  return standin.groups()
}
