/**
 * Pausing and unpausing a container through the engine, returning once the
 * engine's own record of the container agrees.
 *
 * Docker 20.10 records a pause twice: when its pause call returns, and again
 * when it handles containerd's "paused" event. That event can be handled
 * after an unpause that followed at once (under gVisor, whose events come
 * later), and until containerd's "resumed" event is handled too, the engine
 * refuses an exec into the running container as paused ("unpause the
 * container before exec", 409) and another unpause as "not paused". The same
 * holds the other way round for a pause right after an unpause. So each call
 * waits for the engine's state to say what was asked: one inspect when the
 * state is already right, which is almost always.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type Docker from 'dockerode'

/** How long the engine's record may lag the freezer. Past it, the next call gets the engine's own answer. */
const STATE_SETTLE_MS = 5_000
const STATE_POLL_MS = 20

export async function pauseContainer(
  container: Docker.Container,
  signal?: AbortSignal,
): Promise<void> {
  await container.pause(signal ? { abortSignal: signal } : {})
  await untilEngineSays(container, true, signal)
}

export async function unpauseContainer(
  container: Docker.Container,
  signal?: AbortSignal,
): Promise<void> {
  await container.unpause(signal ? { abortSignal: signal } : {})
  await untilEngineSays(container, false, signal)
}

async function untilEngineSays(
  container: Docker.Container,
  paused: boolean,
  signal: AbortSignal | undefined,
): Promise<void> {
  const deadline = Date.now() + STATE_SETTLE_MS
  for (;;) {
    const info = await container.inspect(signal ? { abortSignal: signal } : {})
    // A container that stopped meanwhile is not this wait's business: the caller learns of it next.
    if (info.State.Paused === paused || !info.State.Running) return
    if (Date.now() >= deadline) return
    await sleep(STATE_POLL_MS, undefined, signal ? { signal } : {})
  }
}
