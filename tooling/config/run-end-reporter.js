// Writes test-results/run-end.json when a vitest run ends: how it ended and the
// errors no test owned (an unhandled rejection from a background sweep, a
// failed teardown). Vitest exits non-zero on those, but its JSON reporter
// counts only tests and suites, so without this file the CI summary would read
// green over a red run.
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'

export default class RunEndReporter {
  /** @param {{ outputFile: string }} options */
  constructor(options) {
    this.outputFile = resolve(options.outputFile)
  }

  /**
   * @param {ReadonlyArray<unknown>} _testModules
   * @param {ReadonlyArray<{ name?: string, message?: string, stack?: string }>} unhandledErrors
   * @param {string} reason
   */
  onTestRunEnd(_testModules, unhandledErrors, reason) {
    mkdirSync(dirname(this.outputFile), { recursive: true })
    const errors = unhandledErrors.map((error) => ({
      name: error?.name ?? 'Error',
      message: error?.message ?? String(error),
      stack: error?.stack,
    }))
    writeFileSync(
      this.outputFile,
      `${JSON.stringify({ reason, unhandledErrors: errors }, null, 2)}\n`,
    )
  }
}
