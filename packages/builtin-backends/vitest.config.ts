import { cordonVitestConfig } from '@cordon/tooling-config/vitest'

export default cordonVitestConfig({ typecheck: true })
