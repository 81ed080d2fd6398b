import type { EngineCall } from './engine-trace.js'
import { formatMs, summarize } from './stats.js'

/** A markdown table of one traced operation's engine calls. */
export function engineCallTable(
  title: string,
  trace: { totalMs: number; calls: readonly EngineCall[] },
): string {
  const rows = trace.calls.map((call) => {
    if (Number.isNaN(call.answeredMs)) {
      return `| ${call.startMs.toFixed(1)} | ${call.method} ${call.path} | (still open at the end) | |`
    }
    const answered = call.answeredMs - call.startMs
    const stream =
      call.streamEndMs === undefined ? '' : `${(call.streamEndMs - call.startMs).toFixed(1)}`
    return `| ${call.startMs.toFixed(1)} | ${call.method} ${call.path} | ${answered.toFixed(1)} | ${stream} |`
  })
  const inCalls = Math.min(trace.totalMs, busyTime(trace.calls, trace.totalMs))
  return [
    `**${title}**: ${trace.totalMs.toFixed(1)} ms in total, ${trace.calls.length} engine calls, ${inCalls.toFixed(1)} ms with at least one call outstanding, ${(trace.totalMs - inCalls).toFixed(1)} ms in the host process between calls.`,
    '',
    '| starts at (ms) | call | answer after (ms) | stream ended after (ms) |',
    '| ---: | --- | ---: | ---: |',
    ...rows,
  ].join('\n')
}

/** Time covered by at least one outstanding call (answer or stream end, whichever is later), up to `untilMs`. */
function busyTime(calls: readonly EngineCall[], untilMs: number): number {
  const spans = calls
    .map((call) => {
      const end = Math.max(call.answeredMs, call.streamEndMs ?? 0)
      return [call.startMs, Number.isNaN(end) ? untilMs : Math.min(untilMs, end)] as const
    })
    .sort((a, b) => a[0] - b[0])
  let total = 0
  let currentStart = Number.NaN
  let currentEnd = Number.NaN
  for (const [start, end] of spans) {
    if (Number.isNaN(currentStart) || start > currentEnd) {
      if (!Number.isNaN(currentStart)) total += currentEnd - currentStart
      currentStart = start
      currentEnd = end
    } else {
      currentEnd = Math.max(currentEnd, end)
    }
  }
  if (!Number.isNaN(currentStart)) total += currentEnd - currentStart
  return total
}

/**
 * A markdown table of the create steps cordon's provider reports on each
 * `create.ready` event: per step, in the order the backend names them, the
 * median and p95 over the creates, and how many creates had the step.
 */
export function createStepsTable(creates: ReadonlyArray<Readonly<Record<string, number>>>): string {
  if (creates.length === 0) return '(no `create.ready` event carried steps)'
  const order: string[] = []
  for (const steps of creates)
    for (const name of Object.keys(steps)) if (!order.includes(name)) order.push(name)
  const rows = order.map((name) => {
    const values = creates.flatMap((steps) => (steps[name] === undefined ? [] : [steps[name]!]))
    const summary = summarize(values)
    return `| ${name} | ${summary.n} | ${formatMs(summary.median)} | ${formatMs(summary.p95)} |`
  })
  const totals = summarize(creates.map((steps) => Object.values(steps).reduce((a, b) => a + b, 0)))
  return [
    '| step | creates | median | p95 |',
    '| --- | ---: | ---: | ---: |',
    ...rows,
    `| (all steps: the create call) | ${totals.n} | ${formatMs(totals.median)} | ${formatMs(totals.p95)} |`,
  ].join('\n')
}
