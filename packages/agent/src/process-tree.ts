import { readdirSync, readFileSync } from 'node:fs'
import { randomBytes } from './random-bytes.js'
import { actAsItself, actAsUser } from './user-identity.js'

/**
 * Finding and killing every process that belongs to one exec.
 *
 * Killing the process group is not enough: `setsid` moves a grandchild into a
 * group of its own, and once its parent dies it is re-parented away from the
 * exec's tree. So a process belongs to the exec if any of these holds:
 *
 * - it is in the exec's process group (the exec is spawned as a group leader);
 * - following parent pids upward from it reaches the exec's process;
 * - its environment carries the exec's marker variable, which every
 *   descendant inherits unless it deliberately clears its environment.
 *
 * Members are stopped before they are killed, and the scan repeats until it
 * finds no live member, so a process that forks while being killed does not
 * leave a child behind.
 */

/** The environment variable that marks every process of one exec. */
export const EXEC_MARKER_VARIABLE = 'CORDON_EXEC_ID'

/**
 * The environment variable that marks every process any command of this
 * agent started, so that the agent's end takes with it what finished
 * commands left running (a `sleep 100 &`), where no container or guest
 * ends around it (an agent run as a local process).
 */
export const AGENT_MARKER_VARIABLE = 'CORDON_RUN_ID'

/**
 * This agent process's value of {@link AGENT_MARKER_VARIABLE}, made on first
 * use from the agent's own random source (random-bytes.ts: loading
 * `node:crypto` at start costs every create milliseconds).
 */
let runMarker: string | undefined
export function agentRunMarker(): string {
  runMarker ??= randomBytes(12).toString('hex')
  return runMarker
}

interface ProcessInfo {
  readonly pid: number
  readonly ppid: number
  readonly zombie: boolean
}

function readProcess(pid: number): ProcessInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1')
    // The command name is in parentheses and may itself contain ") ".
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return { pid, ppid: Number(fields[1]), zombie: fields[0] === 'Z' || fields[0] === 'X' }
  } catch {
    return undefined
  }
}

function carriesMarker(pid: number, needle: Buffer): boolean {
  try {
    const environ = readFileSync(`/proc/${pid}/environ`)
    return environ.indexOf(needle) !== -1
  } catch {
    return false
  }
}

/** A user whose processes' environments are read as that user (see {@link findExecProcesses}). */
export interface MarkerReader {
  readonly uid: number
  readonly gid: number
}

/**
 * Live (non-zombie) processes of the exec rooted at `rootPid` and marked with
 * `marker`. When the agent runs commands as another user it cannot read their
 * environments as root (that needs the ptrace right, which the agent is not
 * given), so it takes on their ids for the scan, which is synchronous and so
 * touches nothing else the agent does, and returns to root before signalling.
 */
export function findExecProcesses(
  rootPid: number | undefined,
  marker: string,
  as?: MarkerReader,
  variable: string = EXEC_MARKER_VARIABLE,
): number[] {
  let entries: string[]
  try {
    entries = readdirSync('/proc')
  } catch {
    return []
  }
  const self = process.pid
  const all = new Map<number, ProcessInfo>()
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    const info = readProcess(Number(entry))
    if (info) all.set(info.pid, info)
  }
  const needle = Buffer.from(`${variable}=${marker}\0`)
  const members: number[] = []
  const candidates: ProcessInfo[] = []
  for (const info of all.values()) {
    if (info.pid === self || info.zombie) continue
    if (rootPid !== undefined && descendsFrom(info, rootPid, all)) members.push(info.pid)
    else candidates.push(info)
  }
  const marked: number[] = []
  asUser(as, () => {
    for (const info of candidates) if (carriesMarker(info.pid, needle)) marked.push(info.pid)
  })
  members.push(...marked)
  if (rootPid === undefined) {
    // No known root (a process the engine started): descendants of every
    // marked process belong too, including any that cleared their environment.
    const roots = new Set(marked)
    for (const info of candidates)
      if (!roots.has(info.pid) && marked.some((pid) => descendsFrom(info, pid, all)))
        members.push(info.pid)
  }
  return members
}

/** Runs `read` with effective ids `as` (then back to the agent's own), or as it is. */
function asUser(as: MarkerReader | undefined, read: () => void): void {
  ;(as ? actAsUser(as) : actAsItself)(read)
}

function descendsFrom(info: ProcessInfo, rootPid: number, all: Map<number, ProcessInfo>): boolean {
  let current: ProcessInfo | undefined = info
  for (let depth = 0; current && depth < 4096; depth++) {
    if (current.pid === rootPid) return true
    if (current.ppid <= 1) return false
    current = all.get(current.ppid)
  }
  return false
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name)
  } catch {
    // Already gone, or not ours to signal.
  }
}

/**
 * Sends `name` to every process of the exec. For SIGKILL it stops each member
 * first and rescans until nothing is left (at most `maxRounds` scans).
 * Returns how many distinct processes were signalled.
 */
export function signalExecProcesses(
  rootPid: number | undefined,
  marker: string,
  name: 'SIGKILL' | 'SIGTERM' | 'SIGHUP',
  as?: MarkerReader,
  maxRounds = 20,
  variable: string = EXEC_MARKER_VARIABLE,
): number {
  const signalled = new Set<number>()
  if (rootPid !== undefined && rootPid > 1) signal(-rootPid, name)
  for (let round = 0; round < maxRounds; round++) {
    const members = findExecProcesses(rootPid, marker, as, variable)
    const fresh = name === 'SIGKILL' ? members : members.filter((pid) => !signalled.has(pid))
    if (fresh.length === 0) break
    if (name === 'SIGKILL') for (const pid of fresh) signal(pid, 'SIGSTOP')
    for (const pid of fresh) {
      signal(pid, name)
      signalled.add(pid)
    }
    if (name !== 'SIGKILL') break
    // A killed process lingers briefly before it turns into a zombie.
    sleepSync(round < 3 ? 2 : 10)
  }
  return signalled.size
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4))
function sleepSync(ms: number): void {
  Atomics.wait(sleepCell, 0, 0, ms)
}

/**
 * Kills every process any command of this agent started and left running
 * (and their descendants): the agent's last act when it stops, so that an
 * agent with no container around it leaves nothing behind. Returns how
 * many processes were killed.
 */
export function killAgentCommands(as?: MarkerReader): number {
  return signalExecProcesses(undefined, agentRunMarker(), 'SIGKILL', as, 20, AGENT_MARKER_VARIABLE)
}
