import { setTimeout as sleep } from 'node:timers/promises'
import type { LostReason } from '@cordon/agent/sandbox'

/**
 * How long a reconnected sandbox whose channel failed waits for the engine to
 * say its container ended, while the engine still says it runs. Docker
 * learns of a container's end from an event it handles on its own time, so
 * on a loaded machine its inspect can say `Running` for a moment after the
 * agent is gone; asked once, such a sandbox stayed `ready` until another
 * call failed.
 */
export const ENGINE_END_NOTICE_MS = 2_000

/** Between two questions to the engine. */
const ASK_EVERY_MS = 100

/**
 * Why a reconnected sandbox's channel failed, as its container says it:
 * `lifetime` if it ended within a second of its lifetime's end, `lost` if
 * it ended otherwise (or the engine could not say: `isRunning` answers
 * undefined), undefined if it still runs after {@link ENGINE_END_NOTICE_MS}
 * (the channel failed on its own; the next failure asks again).
 */
export async function explainDetachedLoss(
  isRunning: () => Promise<boolean | undefined>,
  endsAt: number,
  noticeMs: number = ENGINE_END_NOTICE_MS,
): Promise<LostReason | undefined> {
  const deadline = Date.now() + noticeMs
  for (;;) {
    if (!(await isRunning())) return Date.now() >= endsAt - 1_000 ? 'lifetime' : 'lost'
    if (Date.now() >= deadline) return undefined
    await sleep(ASK_EVERY_MS)
  }
}
