import { cordonVitestConfig } from '@cordon/tooling-config/vitest'
import { mergeConfig } from 'vitest/config'

// Each case may create guests on the local engine; give them room on a shared 2-core machine.
export default mergeConfig(cordonVitestConfig({ timeoutMs: 90_000 }), {
  test: { globalSetup: ['./test/global-setup.ts'] },
})
