import { builtinBackends } from '@cordon/builtin-backends'

/**
 * The ACI standby-pool backend's definition; it loads this package's code,
 * as a third-party backend's definition loads its own.
 */
export const aciStandbyPoolBackend = builtinBackends(() => import('./index.js')).aciStandbyPool
