/** Resolves once `condition` holds, asking every 100 ms; fails after 50 tries (about 5 s). */
export async function until(condition: () => Promise<boolean>): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    if (await condition()) return
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error('condition never held')
}
