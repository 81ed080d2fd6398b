import { describe, expect, it } from 'vitest'
import * as kit from '../src/backend-kit.js'
import * as host from '../src/index.js'

/**
 * What each entry point exports at run time is public API: a change here is a
 * deliberate change of the contract (and of a changeset), never an accident
 * of an `export *`.
 */
describe('entry points', () => {
  it('@cordon/core exports the host contract and nothing else', () => {
    expect(Object.keys(host).sort()).toEqual([
      'ContainerSandboxLayoutValidationError',
      'SANDBOX_DEFAULT_MAX_PROCESSES',
      'SANDBOX_DEFAULT_MAX_READ_BYTES',
      'SANDBOX_DEFAULT_MEMORY_LIMIT_MB',
      'SANDBOX_DEFAULT_OUTPUTS_PATH',
      'SANDBOX_DEFAULT_SCRATCH_PATH',
      'SANDBOX_DEFAULT_SKILLS_PARENT',
      'SANDBOX_DEFAULT_TIMEOUT_MS',
      'SANDBOX_DEFAULT_TOOL_RESULTS_PATH',
      'SANDBOX_DEFAULT_TRANSCRIPTS_PATH',
      'SANDBOX_DEFAULT_UPLOADS_PATH',
      'SANDBOX_FORK_MAX',
      'SANDBOX_MAX_OUTPUT_BYTES',
      'SKILL_ID_PATTERN',
      'SandboxAbortedError',
      'SandboxBackendNotImplementedError',
      'SandboxBackendNotInstalledError',
      'SandboxBackendUnavailableError',
      'SandboxConfigValidationError',
      'SandboxControlRefusedError',
      'SandboxCreateTimeoutError',
      'SandboxCredentialRefusedError',
      'SandboxDestroyedError',
      'SandboxError',
      'SandboxFileNotFoundError',
      'SandboxFileTooLargeError',
      'SandboxHostFileError',
      'SandboxImagePullError',
      'SandboxNotFoundError',
      'SandboxOperationError',
      'SandboxPathError',
      'SandboxPausedError',
      'SandboxReadinessError',
      'SandboxSnapshotNotFoundError',
      'SandboxTransportError',
      'SandboxVolumeError',
      'VOLUME_MAX_SIZE_MB',
      'VOLUME_NAME_PATTERN',
      'brokeredCredentialSchema',
      'containerSandboxLayoutSchema',
      'egressPolicySchema',
      'escapeTerminalControls',
      'isHostAllowed',
      'isSandboxId',
      'isSnapshotId',
      'resolveLayout',
      'sandboxCreateConfigSchema',
      'serializeSandboxError',
    ])
  })

  it('@cordon/core/backend exports the backend kit', () => {
    expect(Object.keys(kit).sort()).toEqual([
      'CredentialStore',
      'DEFAULT_RESOLVER_TIMEOUT_MS',
      'DENY_ALL',
      'ExecOutputCollector',
      'JsonHttpClient',
      'LABEL',
      'MIN_AGENT_SECRET_LENGTH',
      'SANDBOX_ID_PATTERN',
      'SNAPSHOT_ID_PATTERN',
      'askResolver',
      'backgroundSweep',
      'boundedMemo',
      'cleanupFailureEvent',
      'compileAllowlist',
      'composeProvider',
      'defaultCredentialStore',
      'defineBackend',
      'durationMsSchema',
      'enforcedLayoutMounts',
      'errorMarker',
      'functionSchema',
      'hasErrorMarker',
      'isTransientStatus',
      'judgeOwner',
      'networkPolicySchema',
      'newSandboxId',
      'newSnapshotId',
      'normalizeHostname',
      'ownerLabels',
      'parseAllowlistEntry',
      'parseBackendConfig',
      'parseConfig',
      'parseRetryAfter',
      'planLayoutMounts',
      'prepareProviderConfig',
      'readableRoots',
      'removeEach',
      'requestRefusal',
      'requireAgentSecret',
      'resolveBackendOptions',
      'resolveSandboxPath',
      'resolverRefusedEvent',
      'retryDelayMs',
      'runCreateSequence',
      'selectBackend',
      'sleep',
      'standaloneProvider',
      'tcpPortSchema',
      'throwIfAborted',
      'tlsClientSchema',
      'validateExecRequest',
      'validatePortForwardRequest',
      'volumesRefusal',
      'withDeadline',
      'withEnforcedLimits',
      'writableRoots',
    ])
  })

  it('the two entry points do not overlap', () => {
    const shared = Object.keys(host).filter((name) => name in kit)
    expect(shared).toEqual([])
  })
})
