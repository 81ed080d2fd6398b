import { builtinBackends } from '@cordon/builtin-backends'

/**
 * The microVM backend's definition; it loads this package's code, as a
 * third-party backend's definition loads its own.
 */
export const microVMBackend = builtinBackends(() => import('./index.js')).microVM
