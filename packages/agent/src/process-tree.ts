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
 * - it carries the exec's supplementary group (exec-group.ts), which every
 *   descendant inherits and none can shed: this alone finds a grandchild
 *   that left the session, was orphaned and cleared its environment;
 * - it is in the exec's process group (the exec is spawned as a group leader);
 * - following parent pids upward from it reaches the exec's process;
 * - its environment carries the exec's marker variable, which every
 *   descendant inherits unless it deliberately clears its environment.
 *
 * The last three are what an untagged exec has (one started by Node's spawn,
 * or without a change of user): there a grandchild that does all three
 * escapes.
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

/** Which processes make up one exec (see the top of this file). */
export interface ExecIdentity {
  /** The exec's first process, a group leader; undefined for one the engine started. */
  readonly rootPid: number | undefined
  /** The value of `variable` in the exec's environment. */
  readonly marker: string
  /** The marker's variable ({@link EXEC_MARKER_VARIABLE} unless said). */
  readonly variable?: string
  /** The exec's supplementary group, if its processes carry one. */
  readonly group?: number | undefined
}

interface ProcessInfo {
  readonly pid: number
  readonly ppid: number
  readonly zombie: boolean
  readonly groups: readonly number[]
}

/**
 * One process's parent, state and supplementary groups, from its status file
 * (readable by anyone: no identity switch needed). gVisor writes the same
 * fields, with other spacing.
 */
function readProcess(pid: number): ProcessInfo | undefined {
  let status: string
  try {
    status = readFileSync(`/proc/${pid}/status`, 'latin1')
  } catch {
    return undefined
  }
  const state = /^State:\s*(\S)/m.exec(status)?.[1]
  const ppid = /^PPid:\s*(\d+)/m.exec(status)?.[1]
  if (state === undefined || ppid === undefined) return undefined
  const groups = (/^Groups:([^\n]*)/m.exec(status)?.[1] ?? '')
    .split(/\s+/)
    .filter(Boolean)
    .map(Number)
  return { pid, ppid: Number(ppid), zombie: state === 'Z' || state === 'X', groups }
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
 * Live (non-zombie) processes of the exec. When the agent runs commands as
 * another user it cannot read their
 * environments as root (that needs the ptrace right, which the agent is not
 * given), so it takes on their ids for the scan, which is synchronous and so
 * touches nothing else the agent does, and returns to root before signalling.
 */
export function findExecProcesses(exec: ExecIdentity, as?: MarkerReader): number[] {
  const { rootPid, marker, group } = exec
  const variable = exec.variable ?? EXEC_MARKER_VARIABLE
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
    if (group !== undefined && info.groups.includes(group)) members.push(info.pid)
    else if (rootPid !== undefined && descendsFrom(info, rootPid, all)) members.push(info.pid)
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
  exec: ExecIdentity,
  name: 'SIGKILL' | 'SIGTERM' | 'SIGHUP',
  as?: MarkerReader,
  maxRounds = 20,
): number {
  const signalled = new Set<number>()
  const { rootPid } = exec
  if (rootPid !== undefined && rootPid > 1) signal(-rootPid, name)
  for (let round = 0; round < maxRounds; round++) {
    const members = findExecProcesses(exec, as)
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
  return signalExecProcesses(
    { rootPid: undefined, marker: agentRunMarker(), variable: AGENT_MARKER_VARIABLE },
    'SIGKILL',
    as,
  )
}
