import type { SandboxBackendName } from '@cordon/core'

/** The package that implements each backend; hosts install only the one they use. */
export const BACKEND_PACKAGES: Readonly<Record<SandboxBackendName, string>> = {
  'container:docker': '@cordon/backend-docker',
  'container:runsc': '@cordon/backend-docker',
  'container:aci-standby-pool': '@cordon/backend-aci',
  'microvm:self-hosted': '@cordon/backend-microvm',
}
