/**
 * Fewer threads for the agent under gVisor.
 *
 * The agent runs as root and does every path-based file operation with its
 * effective ids switched to the sandbox user's (the agent's
 * user-identity.ts): four id changes an operation. glibc makes each change
 * process-wide by signalling every other thread and waiting for it to change
 * its own, so each change costs a handful of system calls per thread. Under
 * runc that is microseconds. Under gVisor's ptrace platform (the only one
 * Debian's runsc runs on these machines) every system call stops the thread
 * and wakes the sentry: traced inside a sandbox, one `statFile` made 633
 * system calls in 12 threads, 44 of them `setresuid`, and only a handful did
 * the work (bench/misses.md, issue 30).
 *
 * Node starts 4 V8 workers and libuv 4 pool threads; the agent needs neither
 * many: it serves one sandbox on one CPU, its file reads and writes are
 * streamed one chunk at a time, and its compiles are few. Under gVisor it
 * gets one of each. Under runc the defaults stay: there the broadcast is
 * cheap, and the pool's threads let a slow read overlap another.
 */

/** Node's options for the agent under gVisor: one V8 worker (a Node option: V8's code cache stays valid). */
export const GVISOR_AGENT_NODE_OPTIONS: readonly string[] = ['--v8-pool-size=1']

/** libuv's pool under gVisor: one thread (the agent's `CORDON_AGENT_POOL_THREADS`). */
export const GVISOR_AGENT_POOL_THREADS = 1

/** The agent's Node options for a runtime. */
export function agentNodeOptions(runtime: string | undefined): readonly string[] {
  return runtime === 'runsc' ? GVISOR_AGENT_NODE_OPTIONS : []
}

/** The agent's libuv pool size for a runtime, or undefined for libuv's default. */
export function agentPoolThreads(runtime: string | undefined): number | undefined {
  return runtime === 'runsc' ? GVISOR_AGENT_POOL_THREADS : undefined
}
