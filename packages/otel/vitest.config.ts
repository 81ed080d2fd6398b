import { cordonVitestConfig } from '@cordon/tooling-config/vitest'
import { mergeConfig } from 'vitest/config'

export default mergeConfig(cordonVitestConfig({ timeoutMs: 120_000 }), {
  test: { globalSetup: ['./test/global-setup.ts'] },
})
