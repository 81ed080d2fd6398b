// Shared Vitest settings. Every package's vitest.config.ts spreads this preset
// so that each test run also writes a JSON report the CI summary can count from
// (test-results/vitest.json, one per package), and a note of how the run ended
// with the errors no test owned (test-results/run-end.json).
import { defineConfig } from 'vitest/config'
import RunEndReporter from './run-end-reporter.js'

/**
 * @param {{ timeoutMs?: number, typecheck?: boolean }} [options]
 */
export function cordonVitestConfig(options = {}) {
  return defineConfig({
    test: {
      include: ['test/**/*.test.ts'],
      testTimeout: options.timeoutMs ?? 20_000,
      hookTimeout: options.timeoutMs ?? 60_000,
      reporters: [
        'default',
        ['json', { outputFile: 'test-results/vitest.json' }],
        new RunEndReporter({ outputFile: 'test-results/run-end.json' }),
      ],
      typecheck: options.typecheck
        ? { enabled: true, include: ['test/**/*.test-d.ts'], tsconfig: './tsconfig.test.json' }
        : { enabled: false },
    },
  })
}
