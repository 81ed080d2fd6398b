import { type AgentClient, type StdioChannel, waitForAgentConnection } from '@cordon/agent/sandbox'
import { type SandboxId, SandboxReadinessError } from '@cordon/core'
import type { DirectRoute } from './direct-socket.js'

/**
 * How long readiness waits for the direct socket to connect before it tries
 * the attach as well. The agent listens on the socket before it serves the
 * attach, so a socket that has not connected by then failed to open (the
 * agent logs why); an agent booting on a loaded machine past it only gets
 * both tried, the first to answer winning.
 *
 * Under gVisor the agent listens later: its Node alone takes 150-180 ms to
 * reach the agent's first line there, and the listener was up 230-340 ms
 * after the engine's start call returned (traced on a quiet machine, four
 * creates). With 250 ms nearly every gVisor create tried the attach too,
 * and the second handshake on the agent's one thread held up the first
 * command: 67-91 ms to the first exec's answer against 50-57 ms with one.
 * A host socket that never opens costs such a create the longer wait.
 */
export function attachFallbackMs(runtime: string | undefined): number {
  return runtime === 'runsc' ? 1_000 : 250
}

/** Resolves when the agent answers; fails at once, with its log, if the container stops first. */
export async function waitForAgent(
  client: AgentClient,
  sandboxId: SandboxId,
  signal: AbortSignal,
  channel: StdioChannel,
  direct: { readonly route: DirectRoute; readonly attachAfterMs: number } | undefined,
): Promise<void> {
  const stopped = new Promise<never>((_, reject) =>
    channel.onClose(() =>
      reject(
        new SandboxReadinessError(
          `the container stopped before its agent answered: ${channel.log.trim().slice(-1000) || 'no output'}`,
          sandboxId,
        ),
      ),
    ),
  )
  stopped.catch(() => {})
  // The proof is an authenticated connection, kept for the first command
  // (streams are cheap and live as long as the container, so a spare is
  // kept from then on). Where the direct socket is expected, it is dialled
  // alone at first: a handshake over the attach as well would cost the
  // starting agent's one thread milliseconds that the first command waits
  // behind. The attach, which always works, is tried if the socket is not
  // found, fails its handshake, or has not connected within
  // `attachAfterMs` (an agent that could not listen on it); then the
  // first to authenticate counts.
  const decided = new AbortController()
  const either = AbortSignal.any([signal, decided.signal])
  let attachAttempt: Promise<void> | undefined
  let settleViaAttach!: (attempt: Promise<void>) => void
  const viaAttach = new Promise<void>((resolve) => {
    settleViaAttach = resolve
  })
  viaAttach.catch(() => {})
  const attach = (): Promise<void> => {
    if (!attachAttempt) {
      attachAttempt = waitForAgentConnection(client, sandboxId, either)
      settleViaAttach(attachAttempt)
    }
    return attachAttempt
  }
  let fallback: ReturnType<typeof setTimeout> | undefined
  let viaDirect: Promise<void> | undefined
  if (direct) {
    fallback = setTimeout(attach, direct.attachAfterMs)
    viaDirect = direct.route
      .firstConnection(either)
      .catch(() => undefined)
      .then(async (stream) => {
        clearTimeout(fallback)
        if (!stream) return attach()
        try {
          await client.adoptSpareConnection(stream, either)
        } catch {
          await attach()
        }
      })
  } else {
    attach()
  }
  try {
    await Promise.race([viaAttach, ...(viaDirect ? [viaDirect] : []), stopped])
  } finally {
    clearTimeout(fallback)
    decided.abort()
  }
}
