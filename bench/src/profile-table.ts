import type { EngineCall } from './engine-trace.js'

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
