import { cordonVitestConfig } from '@cordon/tooling-config/vitest'

// Each case may create guests on the local engine; give them room on a shared 2-core machine.
export default cordonVitestConfig({ timeoutMs: 90_000 })
