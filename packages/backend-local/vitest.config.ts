import { cordonVitestConfig } from '@cordon/tooling-config/vitest'

// Each case starts real agents as local processes; give them room on a shared 2-core machine.
export default cordonVitestConfig({ timeoutMs: 60_000 })
