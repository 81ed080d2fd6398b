import { randomUUID } from 'node:crypto'

/**
 * The label key every engine resource a test creates carries, with the run's
 * id as its value, so the leak check (and a person after a crash) can find
 * what the run made and nothing else.
 */
export const TEST_RUN_LABEL = 'cordon-test.run'

/** Built by tooling/engine/setup.sh; no registry is needed. */
export const BUSYBOX_IMAGE = 'cordon-test/busybox:latest'
/** Built by tooling/engine/setup.sh: busybox plus the host's own `node`. */
export const NODE_IMAGE = 'cordon-test/node:latest'

/**
 * The id of this test run: the one a global setup gave it (see
 * {@link startTestRun}), else one for this process. Read when called, so a
 * global setup that names the run after importing this module still counts.
 */
export function testRunId(): string {
  return process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}`
}

/** `{ 'cordon-test.run': <run id> }`: the labels to put on whatever a test creates. */
export function testRunLabels(): Record<string, string> {
  return { [TEST_RUN_LABEL]: testRunId() }
}

/**
 * Names the run, once, for the whole vitest invocation: the test workers
 * inherit the variable, so every file labels its resources with the same id.
 */
export function startTestRun(): string {
  process.env.CORDON_TEST_RUN_ID ??= `run-${randomUUID()}`
  return process.env.CORDON_TEST_RUN_ID
}
