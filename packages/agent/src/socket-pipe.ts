import { connect, Socket } from 'node:net'

/**
 * `agent --pipe <socket>`: joins this process's stdin and stdout to one
 * connection to the agent's socket, byte for byte, both ways. The way back
 * to an agent restored from a memory snapshot under gVisor (whose restored
 * stdin pipe gVisor does not wake again), where the runtime holds no
 * cordon-launcher for this architecture: the launcher's `--pipe` does the
 * same in a fraction of Node's start-up time. Started by the host with the
 * engine's exec, as root (the socket is root's, in a root-only directory);
 * it parses nothing, and the agent authenticates what comes over it.
 */
export function runSocketPipe(socketPath: string): void {
  const output = new Socket({ fd: 1, readable: false, writable: true })
  const connection = connect({ path: socketPath, allowHalfOpen: true })
  connection.on('error', (error) => {
    process.stderr.write(`agent --pipe: ${socketPath}: ${error.message}\n`)
    process.exit(1)
  })
  // The host's end closing ends the agent's session (it answers by closing its end).
  process.stdin.pipe(connection)
  // The agent's end closing ends this process once its last bytes are out,
  // whether or not the host has closed its end (as cordon-launcher's --pipe).
  connection.pipe(output)
  output.on('finish', () => process.exit(0))
  connection.on('close', () => process.exit(0))
}
