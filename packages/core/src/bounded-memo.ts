/**
 * A pure function's last answers, by input string, for checks that run on
 * every request of a proxy or gateway. Requests name nearly the same few
 * hosts and come from the same few addresses, so parsing them again each
 * time was measurable CPU on the path to the upstream's dial (see the
 * callers for what was measured).
 *
 * Bounded: the table is emptied when full, and an input longer than
 * `maxInputLength` is computed but not kept, so hostile input can only make
 * it miss, never grow it past `maxEntries` short strings. An object answer
 * is frozen, since every caller with the same input shares it. Only for
 * functions whose answer depends on the input alone.
 */
export function boundedMemo<T>(
  compute: (input: string) => T,
  limits: { readonly maxEntries: number; readonly maxInputLength: number },
): (input: string) => T {
  const answers = new Map<string, T>()
  return (input) => {
    if (answers.has(input)) return answers.get(input) as T
    const computed = compute(input)
    const answer =
      typeof computed === 'object' && computed !== null ? Object.freeze(computed) : computed
    if (input.length > limits.maxInputLength) return answer
    if (answers.size >= limits.maxEntries) answers.clear()
    answers.set(input, answer)
    return answer
  }
}
