#!/usr/bin/env node
// Adds up the JSON reports every package's vitest run wrote
// (test-results/vitest.json) and prints one line: "N passed, N failed[, N skipped]".
// A package with a test script but no report counts as one failure: its run
// crashed before the reporter could write, and that must not read as green.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

const root = new URL('../..', import.meta.url).pathname
const packageDirs = ['packages', 'tooling', 'examples']
  .flatMap((group) =>
    existsSync(join(root, group))
      ? readdirSync(join(root, group)).map((name) => join(root, group, name))
      : [],
  )
  .concat([join(root, 'bench')])
  .filter((dir) => existsSync(join(dir, 'package.json')))

let passed = 0
let failed = 0
let skipped = 0
// Each failed test by file and name, printed just before the count: a CI log
// is often read only from its end, and a bare count says nothing of what broke.
const failures = []
for (const dir of packageDirs) {
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
  if (!manifest.scripts?.test) continue
  const reportPath = join(dir, 'test-results', 'vitest.json')
  if (!existsSync(reportPath)) {
    console.error(
      `summary: ${manifest.name} has a test script but wrote no report; counted as 1 failure`,
    )
    failed += 1
    continue
  }
  const report = JSON.parse(readFileSync(reportPath, 'utf8'))
  passed += report.numPassedTests ?? 0
  failed += report.numFailedTests ?? 0
  for (const file of report.testResults ?? []) {
    for (const test of file.assertionResults ?? []) {
      if (test.status !== 'failed') continue
      const firstLine = String(test.failureMessages?.[0] ?? '')
        .split('\n')[0]
        .slice(0, 200)
      failures.push(`${file.name.replace(root, '')} > ${test.fullName ?? test.title}: ${firstLine}`)
    }
    if (
      file.status === 'failed' &&
      !(file.assertionResults ?? []).some((t) => t.status === 'failed')
    )
      failures.push(
        `${file.name.replace(root, '')}: ${String(file.message ?? '')
          .split('\n')[0]
          .slice(0, 200)}`,
      )
  }
  skipped += (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0)
  if (report.success === false && (report.numFailedTests ?? 0) === 0) {
    console.error(
      `summary: ${manifest.name} reported an unsuccessful run (a suite or hook failed); counted as 1 failure`,
    )
    failed += 1
  }
  // Errors outside any test fail vitest's run but are not in its JSON report.
  const runEndPath = join(dir, 'test-results', 'run-end.json')
  if (existsSync(runEndPath)) {
    const runEnd = JSON.parse(readFileSync(runEndPath, 'utf8'))
    for (const error of runEnd.unhandledErrors ?? []) {
      console.error(
        `summary: ${manifest.name} had an error outside any test, counted as 1 failure: ${error.name}: ${error.message}\n${error.stack ?? ''}`,
      )
      failed += 1
      failures.push(`${manifest.name}: an error outside any test: ${error.name}: ${error.message}`)
    }
  }
}
// Checks that ran outside vitest (lint, type check) and failed count as one
// failure each, named on stderr, so the line never reads green over them.
// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by .ci/run itself, not an input of a turbo task
for (const check of (process.env.CORDON_FAILED_CHECKS ?? '').split(',').filter(Boolean)) {
  console.error(`summary: ${check} failed; counted as 1 failure`)
  failed += 1
}
// The test command's own exit status has the last word: a red run with no
// failure found above is still one failure, never a green line.
// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by .ci/run itself, not an input of a turbo task
const testStatus = Number(process.env.CORDON_TEST_STATUS ?? '0')
if (testStatus !== 0 && failed === 0) {
  console.error(
    `summary: the test command exited ${testStatus} with no failure in any report; counted as 1 failure`,
  )
  failed += 1
}
for (const failure of failures.slice(0, 30)) console.log(`FAILED ${failure}`)
if (failures.length > 30) console.log(`FAILED ... and ${failures.length - 30} more`)
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`)
process.exitCode = failed > 0 ? 1 : 0
