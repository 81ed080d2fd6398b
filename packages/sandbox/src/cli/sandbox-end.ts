import type { CordonSandbox, SandboxEndReason } from '@cordon/core'

/** How long to wait for a sandbox that failed its program to be known as ended, and why. */
const REASON_WAIT_MS = 2000
const POLL_MS = 50

const WHY: Readonly<Record<SandboxEndReason, string>> = {
  lost: 'its container, VM or agent went away, killed from outside or with its engine',
  'out-of-memory': 'it was killed as a whole for using more memory than it may',
  'storage-limit': 'it wrote more into a capped directory than the cap allows',
  evicted: 'the platform removed it',
  lifetime: 'its lifetime ran out',
  idle: 'its idle timeout passed',
  'provider-closed': 'its provider was closed',
  destroyed: 'it was destroyed',
}

/**
 * If `sandbox` ended underneath cordon while its program ran (cordon had not
 * destroyed it yet), the one line that says so and why; otherwise
 * undefined. A backend may learn that a sandbox ended, and why, a moment
 * after its program's connection broke, so this waits up to 2 s for both.
 */
export async function sandboxEndedLine(sandbox: CordonSandbox): Promise<string | undefined> {
  for (let waited = 0; waited < REASON_WAIT_MS; waited += POLL_MS) {
    if (sandbox.status === 'destroyed' && sandbox.endReason !== undefined) break
    await new Promise((resolve) => setTimeout(resolve, POLL_MS))
  }
  if (sandbox.status !== 'destroyed') return undefined
  const reason = sandbox.endReason
  return reason === undefined
    ? `cordon: the sandbox ended while its program ran; why is not known\n`
    : `cordon: the sandbox ended while its program ran (${reason}): ${WHY[reason]}\n`
}
