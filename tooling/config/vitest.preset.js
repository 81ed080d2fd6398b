// Shared Vitest settings. Every package's vitest.config.ts spreads this preset
// so that each test run also writes a JSON report the CI summary can count from
// (test-results/vitest.json, one per package).
import { defineConfig } from 'vitest/config'

/**
 * @param {{ timeoutMs?: number, typecheck?: boolean }} [options]
 */
export function cordonVitestConfig(options = {}) {
  return defineConfig({
    test: {
      include: ['test/**/*.test.ts'],
      testTimeout: options.timeoutMs ?? 20_000,
      hookTimeout: options.timeoutMs ?? 60_000,
      reporters: ['default', ['json', { outputFile: 'test-results/vitest.json' }]],
      typecheck: options.typecheck
        ? { enabled: true, include: ['test/**/*.test-d.ts'], tsconfig: './tsconfig.test.json' }
        : { enabled: false },
    },
  })
}
