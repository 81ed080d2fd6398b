import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { copyFile, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { agentLoaderPath, agentProgramPath } from '../index.js'

const run = promisify(execFile)

/** How long building and checking a snapshot may take (it takes about a quarter of a second). */
const MAKE_TIMEOUT_MS = 60_000

/**
 * Makes a startup snapshot of the agent's loader at `out`: a guest then
 * starts the agent with `node --snapshot-blob <out> <agent.cjs> [arguments]`,
 * Node's own modules already compiled (the agent's snapshot-warm-up.ts says
 * why; its code-cache-loader.ts how it loads the program).
 *
 * The snapshot is Node's heap after the loader has run through Node's
 * modules; it holds none of the agent's program, which the loader reads at
 * each start. It is built in a new temporary directory, from a copy of the
 * loader there, with an environment of PATH alone and every path named
 * relative to that directory, so nothing of this host's environment and no
 * path of its is in it; every sandbox that mounts it can read it.
 *
 * Node starts only from a snapshot made by the same Node binary with the
 * same V8 flags (Node's own options, such as `--v8-pool-size`, do not
 * count), and refuses to start otherwise: use `nodePath`'s binary in the
 * guest. Before resolving, the snapshot is started once with the program,
 * which must say it started from it (`--startup-snapshot`). Rejects if the build or that check fails or takes
 * longer than 60 s.
 */
export async function makeAgentSnapshot(options: {
  /** Where the snapshot goes. */
  readonly out: string
  /** The Node binary the guest runs (default: this process's). */
  readonly nodePath?: string
  /** The loader and the CommonJS program it loads (default: this package's). */
  readonly loader?: string
  readonly program?: string
}): Promise<void> {
  // A snapshot left at `out` from before must not pass for this one.
  await rm(options.out, { force: true })
  const node = options.nodePath ?? process.execPath
  const dir = await mkdtemp(join(tmpdir(), 'cordon-snapshot-'))
  const settings = {
    cwd: dir,
    env: { PATH: '/usr/bin:/bin', TMPDIR: dir },
    timeout: MAKE_TIMEOUT_MS,
    killSignal: 'SIGKILL' as const,
    encoding: 'utf8' as const,
  }
  try {
    // Relative names, in the temporary directory: Node keeps its own command
    // line in the snapshot, and no path of this host's should be in it.
    await copyFile(options.loader ?? agentLoaderPath(), join(dir, 'agent-loader.cjs'))
    const built = await run(
      node,
      ['--snapshot-blob', 'agent.blob', '--build-snapshot', 'agent-loader.cjs'],
      settings,
    ).catch((error: { stderr?: string; message: string }) => {
      throw new Error(`building the agent's snapshot failed: ${error.stderr || error.message}`)
    })
    if (!existsSync(join(dir, 'agent.blob')))
      throw new Error(`building the agent's snapshot wrote nothing: ${built.stderr}`)
    await copyFile(join(dir, 'agent.blob'), options.out)
    const checked = await run(
      node,
      [
        '--snapshot-blob',
        options.out,
        options.program ?? agentProgramPath('cjs'),
        '--startup-snapshot',
      ],
      settings,
    ).catch((error: { stderr?: string; message: string }) => {
      throw new Error(`the agent's snapshot does not start: ${error.stderr || error.message}`)
    })
    if (checked.stdout !== 'yes\n')
      throw new Error(`the agent's snapshot started, and the agent says "${checked.stdout.trim()}"`)
  } catch (error) {
    await rm(options.out, { force: true })
    throw error
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}
