import { cordonVitestConfig } from '@cordon/tooling-config/vitest'

export default cordonVitestConfig({ timeoutMs: 120_000 })
