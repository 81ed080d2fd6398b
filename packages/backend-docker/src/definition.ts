import { builtinBackends } from '@cordon/builtin-backends'

// This package's own definitions load this package's code, as a third-party
// backend's definition loads its own.
const own = builtinBackends(() => import('./index.js'))

/** The Docker backend with the engine's default runtime (runc on a stock engine). */
export const dockerBackend = own.docker
/** The Docker backend with gVisor (`runtime: 'runsc'`). */
export const runscBackend = own.runsc
