export * from '@cordon/core'
export { BACKEND_PACKAGES } from './backend-packages.js'
export {
  type CreateSandboxProviderOptions,
  createSandboxProvider,
} from './create-sandbox-provider.js'
export { loadBackendModule, type ModuleImporter } from './load-backend.js'
