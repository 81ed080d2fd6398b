import { readFileSync } from 'node:fs'

/** /proc/net/tcp's states (include/net/tcp_states.h) a socket in use is in, by their hex code. */
const IN_USE: Readonly<Record<string, string>> = {
  '01': 'connected',
  '02': 'connecting',
  '03': 'connecting',
  '04': 'closing',
  '05': 'closing',
  '08': 'closing',
  '09': 'closing',
  '0A': 'listening',
  '0B': 'closing',
}

/**
 * The sandbox's TCP sockets in use (listening, connected, half-closed), as
 * `<local port> <state>` descriptions, from /proc/net/tcp and tcp6 (the
 * sandbox's own network stack: gVisor's, or the container's namespace).
 * TIME_WAIT and closed sockets hold nothing and are left out, and so is the
 * agent's own listener on `proxyPort`, which it closes itself when it
 * suspends. Read as the agent (root): every process's sockets are listed.
 */
export function openTcpSockets(proxyPort?: number): string[] {
  const found: string[] = []
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let table: string
    try {
      table = readFileSync(file, 'latin1')
    } catch {
      continue
    }
    for (const line of table.split('\n').slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/)
      const described = state === undefined ? undefined : IN_USE[state.toUpperCase()]
      if (!local || !described) continue
      const port = Number.parseInt(local.split(':').pop() ?? '', 16)
      if (described === 'listening' && port === proxyPort) continue
      found.push(`port ${port} ${described}`)
    }
  }
  return [...new Set(found)]
}
