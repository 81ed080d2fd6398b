import { BUILTIN_BACKEND_PACKAGES, type SandboxBackendName } from '@cordon/builtin-backends'

/** The package that implements each backend; hosts install only the one they use. */
export const BACKEND_PACKAGES: Readonly<Record<SandboxBackendName, string>> = {
  'container:docker': BUILTIN_BACKEND_PACKAGES.docker,
  'container:runsc': BUILTIN_BACKEND_PACKAGES.docker,
  'container:aci-standby-pool': BUILTIN_BACKEND_PACKAGES.aci,
  'microvm:self-hosted': BUILTIN_BACKEND_PACKAGES.microvm,
}
