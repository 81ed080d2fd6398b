import type { LostReason } from '@cordon/agent/sandbox'
import { askUntilEnded } from './engine-lag.js'

/**
 * How long a reconnected sandbox whose channel failed waits for the engine to
 * say its container ended, while the engine still says it runs (engine-lag.ts);
 * asked once, such a sandbox stayed `ready` until another call failed.
 */
export const ENGINE_END_NOTICE_MS = 2_000

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
  const running = await askUntilEnded(isRunning, (answer) => answer === true, {
    forMs: noticeMs,
    everyMs: 100,
  })
  if (running) return undefined
  return Date.now() >= endsAt - 1_000 ? 'lifetime' : 'lost'
}
