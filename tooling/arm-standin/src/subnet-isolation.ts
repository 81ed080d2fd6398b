import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { promisify } from 'node:util'

const run = promisify(execFile)

/** Marks the stand-in's rules, so a crashed run's can be told apart and removed. */
const COMMENT = 'cordon-arm-standin'

/**
 * Makes the stand-in's `--internal` network let nothing out, as the pool
 * subnet's security group does (`README_SECURITY_RULES`: nothing out, Azure's
 * own endpoints included). Docker's internal network keeps a default route
 * to its bridge, and the host answers a container there on every one of its
 * addresses: a sandbox could reach any service on the host. One rule drops
 * connections the network's containers start towards the host; those the
 * host starts (its calls to the agents) and their replies pass. Needs root
 * and iptables, as the engine itself does. Returns the undo.
 */
export async function isolateFromHost(networkId: string): Promise<() => Promise<void>> {
  await removeStaleRules()
  const rule = [
    'INPUT',
    '-i',
    `br-${networkId.slice(0, 12)}`,
    '-m',
    'conntrack',
    '--ctstate',
    'NEW',
    '-m',
    'comment',
    '--comment',
    COMMENT,
    '-j',
    'DROP',
  ]
  await run('iptables', ['-I', ...rule]).catch((error: unknown) => {
    throw new Error(
      'the ARM stand-in cannot keep its sandboxes off the host (iptables -I INPUT failed); it needs root and iptables, as the engine does',
      { cause: error },
    )
  })
  return async () => {
    await run('iptables', ['-D', ...rule]).catch(() => {})
  }
}

/** Rules of stand-ins that died before their undo, for bridges that are gone. */
async function removeStaleRules(): Promise<void> {
  const { stdout } = await run('iptables', ['-S', 'INPUT']).catch(() => ({ stdout: '' }))
  for (const line of stdout.split('\n')) {
    if (!line.includes(`--comment ${COMMENT}`)) continue
    const bridge = /-i (\S+)/.exec(line)?.[1]
    if (!bridge || existsSync(`/sys/class/net/${bridge}`)) continue
    const args = line.replace(/^-A /, '').split(' ')
    await run('iptables', ['-D', ...args]).catch(() => {})
  }
}
