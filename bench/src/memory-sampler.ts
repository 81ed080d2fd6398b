/**
 * Peak growth of this process's memory while an operation runs, sampled
 * every 20 ms against the value just before it. `rss` is what the operating
 * system charges the process; `heap` is V8's heap plus memory held outside it
 * by JS objects (Buffers), where a whole-file buffer would show up.
 *
 * No collection is forced first: a forced full GC resets V8's external-memory
 * heuristics, after which a streamed 100 MiB transfer triggers several more
 * full collections and runs about twice as slowly, so the timed run would no
 * longer be the run a host sees. The peaks therefore include garbage V8 has
 * not collected yet, as they would in a host.
 */
export interface MemoryGrowth {
  readonly rssMiB: number
  readonly heapMiB: number
}

const MiB = 1024 * 1024

export async function measureMemoryGrowth(operation: () => Promise<void>): Promise<MemoryGrowth> {
  const heapOf = (usage: NodeJS.MemoryUsage) => usage.heapUsed + usage.external
  const start = process.memoryUsage()
  let peakRss = start.rss
  let peakHeap = heapOf(start)
  const sample = () => {
    const usage = process.memoryUsage()
    if (usage.rss > peakRss) peakRss = usage.rss
    const heap = heapOf(usage)
    if (heap > peakHeap) peakHeap = heap
  }
  const timer = setInterval(sample, 20)
  try {
    await operation()
  } finally {
    clearInterval(timer)
    sample()
  }
  return { rssMiB: (peakRss - start.rss) / MiB, heapMiB: (peakHeap - heapOf(start)) / MiB }
}
