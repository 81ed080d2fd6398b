import { describe } from 'vitest'
import { declarationCases } from './declaration-cases.js'
import { egressEnforcementCases } from './egress-enforcement-cases.js'
import { execCases } from './exec-cases.js'
import { fileApiCases } from './file-api-cases.js'
import { fileCases } from './file-cases.js'
import { lifecycleCases } from './lifecycle-cases.js'
import { limitCases } from './limit-cases.js'
import { networkCases } from './network-cases.js'
import { pauseCases } from './pause-cases.js'
import { processCases } from './process-cases.js'
import { reconnectCases } from './reconnect-cases.js'
import { useSandboxes } from './shared-sandbox.js'
import { snapshotCases } from './snapshot-cases.js'
import type { SandboxConformanceOptions } from './suite-options.js'
import { volumeCases } from './volume-cases.js'
import { workAndUsageCases } from './work-and-usage-cases.js'
import { workingDirectoryCases } from './working-directory-cases.js'

/**
 * Registers the cordon conformance suite for one backend. Call it at the top
 * level of a vitest test file:
 *
 * ```ts
 * describeSandboxConformance({
 *   name: 'container:docker',
 *   createProvider: () => createDockerSandboxProvider({ ... }),
 * })
 * ```
 *
 * Every case runs against real sandboxes made by the provider. What to
 * prove is read from the backend's declaration (`provider.enforcement`):
 * each control declared enforced is proved from inside a sandbox, and each
 * declared not enforced is checked as a refusal. Both halves of a pair are
 * one case that asserts whichever half the declaration asks for, so every
 * case runs against every backend and none is skipped.
 */
export function describeSandboxConformance(options: SandboxConformanceOptions): void {
  describe(`cordon conformance: ${options.name}`, () => {
    const sandboxes = useSandboxes(options)
    lifecycleCases(options, sandboxes)
    declarationCases(options, sandboxes)
    execCases(options, sandboxes)
    workingDirectoryCases(options, sandboxes)
    fileCases(options, sandboxes)
    fileApiCases(options, sandboxes)
    processCases(options, sandboxes)
    limitCases(options, sandboxes)
    networkCases(options, sandboxes)
    egressEnforcementCases(options, sandboxes)
    workAndUsageCases(options, sandboxes)
    pauseCases(options, sandboxes)
    snapshotCases(options, sandboxes)
    volumeCases(options, sandboxes)
    reconnectCases(options, sandboxes)
  })
}
