/**
 * Waits until the sandbox says why it ended (`endReason`), polling every
 * 50 ms; fails after `timeoutMs` (default 15 s).
 */
export async function endReasonOf<Reason>(
  sandbox: { readonly endReason?: Reason | undefined },
  timeoutMs = 15_000,
): Promise<Reason> {
  const deadline = Date.now() + timeoutMs
  while (sandbox.endReason === undefined) {
    if (Date.now() > deadline) throw new Error('the sandbox did not end')
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return sandbox.endReason
}
