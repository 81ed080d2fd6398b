import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'

/**
 * Which cordon sandbox a harness session id names, kept on disk so that
 * another process can resume the session (`resumeSession({ sessionId })`).
 * The harness chooses session ids and cordon chooses sandbox ids, so the
 * pair is written down when a detached session is created: one file per
 * session (its name a hash of the session id, its content the sandbox id),
 * mode 0600 in a directory of mode 0700, removed when the session is
 * stopped. It holds no credential: `provider.connect` finds that in the
 * provider's own credential store.
 */
export class SessionIndex {
  constructor(readonly directory: string) {}

  /** `$XDG_STATE_HOME/cordon/harness-sessions`, else `~/.local/state/cordon/harness-sessions`. */
  static defaultDirectory(): string {
    const state = process.env.XDG_STATE_HOME
    const base = state?.startsWith('/') ? state : join(homedir(), '.local', 'state')
    return join(base, 'cordon', 'harness-sessions')
  }

  set(sessionId: string, sandboxId: string): void {
    mkdirSync(this.directory, { recursive: true, mode: 0o700 })
    const path = this.pathOf(sessionId)
    const partial = `${path}.${process.pid}.partial`
    writeFileSync(partial, sandboxId, { mode: 0o600 })
    renameSync(partial, path)
  }

  get(sessionId: string): string | undefined {
    try {
      const sandboxId = readFileSync(this.pathOf(sessionId), 'utf8').trim()
      return sandboxId === '' ? undefined : sandboxId
    } catch {
      return undefined
    }
  }

  delete(sessionId: string): void {
    rmSync(this.pathOf(sessionId), { force: true })
  }

  private pathOf(sessionId: string): string {
    return join(this.directory, createHash('sha256').update(sessionId).digest('hex'))
  }
}
