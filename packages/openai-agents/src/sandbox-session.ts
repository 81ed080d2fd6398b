import { type Sandbox, SandboxFileNotFoundError, type SandboxPortForward } from '@cordon/core'
import type { Editor, ToolOutputImage } from '@openai/agents-core'
import {
  type ExecCommandArgs,
  type ExposedPortEndpoint,
  type ListDirectoryArgs,
  type Manifest,
  type MaterializeEntryArgs,
  type ReadFileArgs,
  recordExposedPortEndpoint,
  type SandboxDirectoryEntry,
  SandboxExecTimeoutError,
  SandboxExposedPortUnavailableError,
  SandboxLifecycleError,
  type SandboxSession,
  type SandboxSessionState,
  SandboxUnsupportedFeatureError,
  SandboxWorkspaceReadNotFoundError,
  type SandboxExecResult as SdkExecResult,
  type ViewImageArgs,
} from '@openai/agents-core/sandbox'
import {
  formatExecResponse,
  imageOutputFromBytes,
  truncateOutput,
} from '@openai/agents-core/sandbox/internal'
import { BoundedOutput } from './bounded-output.js'
import { assertEntrySupported, assertManifestSupported } from './manifest-support.js'
import { materializeEntries, placeManifestEntries } from './materialize-entries.js'
import { createWorkspaceEditor } from './workspace-editor.js'
import { resolveWorkspacePath } from './workspace-path.js'

/** The SDK's session state plus what finds the cordon sandbox again. */
export interface CordonSandboxSessionState extends SandboxSessionState {
  /** The cordon sandbox's id (`Sandbox.id`). */
  sandboxId: string
  /** The cordon provider's `id`, e.g. `cordon-container-docker`. */
  providerId: string
  /** Environment the sandbox was created with (the manifest's, resolved). */
  environment: Record<string, string>
}

/**
 * A session of the OpenAI Agents SDK over one cordon sandbox. The SDK's
 * tools (`exec_command`, `apply_patch`, `view_image`) and its manifest
 * handling reach the workspace (the manifest root) through cordon's exec and
 * file operations; nothing runs on the host.
 */
export class CordonSandboxSession implements SandboxSession<CordonSandboxSessionState> {
  state: CordonSandboxSessionState
  readonly sandbox: Sandbox
  readonly #forwards = new Map<number, Promise<SandboxPortForward>>()

  constructor(sandbox: Sandbox, state: CordonSandboxSessionState) {
    this.sandbox = sandbox
    this.state = state
  }

  get #root(): string {
    return this.state.manifest.root
  }

  async running(): Promise<boolean> {
    return this.sandbox.status !== 'destroyed'
  }

  /** A cordon sandbox is running from `create` on; starting checks it still is. */
  async start(): Promise<void> {
    this.#assertUsable()
  }

  /** No PTY: `tty` is refused, so the SDK does not offer `write_stdin`. */
  supportsPty(): boolean {
    return false
  }

  async exec(args: ExecCommandArgs): Promise<SdkExecResult> {
    this.#assertUsable()
    refuseRunAs(args.runAs)
    if (args.tty) {
      throw new SandboxUnsupportedFeatureError(
        'cordon sandboxes have no PTY: run the command without tty (plain pipes).',
        { provider: 'cordon', feature: 'tty' },
      )
    }
    const cwd = resolveWorkspacePath(this.#root, args.workdir)
    const interleaved = new BoundedOutput()
    const result = await this.sandbox.exec(
      args.shell ?? 'sh',
      [(args.login ?? true) ? '-lc' : '-c', args.cmd],
      { cwd, onOutput: (chunk) => interleaved.push(chunk.data) },
    )
    if (result.timedOut) {
      throw new SandboxExecTimeoutError(
        `Command timed out after ${Math.round(result.durationMs)} ms and was killed with its process tree.`,
        { provider: 'cordon', command: args.cmd, stdout: result.stdout, stderr: result.stderr },
      )
    }
    const output = truncateOutput(interleaved.text(), args.maxOutputTokens)
    // What was dropped before the SDK's truncation still counts as printed.
    const originalTokenCount = interleaved.truncated
      ? interleaved.originalTokenCount
      : output.originalTokenCount
    return {
      output: output.text,
      stdout: result.stdout,
      stderr: result.stderr,
      wallTimeSeconds: result.durationMs / 1000,
      exitCode: result.exitCode,
      ...(originalTokenCount === undefined ? {} : { originalTokenCount }),
    }
  }

  async execCommand(args: ExecCommandArgs): Promise<string> {
    return formatExecResponse(await this.exec(args))
  }

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    this.#assertUsable()
    refuseRunAs(args.runAs)
    const path = resolveWorkspacePath(this.#root, args.path)
    const bytes = await this.sandbox.readFile(path).catch((error: unknown) => {
      if (SandboxFileNotFoundError.isInstance(error)) {
        throw new SandboxWorkspaceReadNotFoundError(`File not found: ${args.path}`, {
          path: args.path,
          cause: error,
        })
      }
      throw error
    })
    return args.maxBytes !== undefined && bytes.byteLength > args.maxBytes
      ? bytes.subarray(0, args.maxBytes)
      : bytes
  }

  async viewImage(args: ViewImageArgs): Promise<ToolOutputImage> {
    return imageOutputFromBytes(args.path, await this.readFile(args))
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    this.#assertUsable()
    refuseRunAs(args.runAs)
    const dir = resolveWorkspacePath(this.#root, args.path)
    // One command lists the directory with each entry's kind; NUL-separated
    // so that any file name survives.
    const listed = await this.sandbox.exec('sh', [
      '-c',
      'cd -- "$1" && for f in * .*; do case "$f" in .|..) continue ;; esac; [ -e "$f" ] || [ -L "$f" ] || continue; if [ -L "$f" ]; then t=o; elif [ -d "$f" ]; then t=d; elif [ -f "$f" ]; then t=f; else t=o; fi; printf "%s%s\\0" "$t" "$f"; done',
      'list-dir',
      dir,
    ])
    if (listed.exitCode !== 0) {
      throw new SandboxWorkspaceReadNotFoundError(`Directory not found: ${args.path}`, {
        path: args.path,
        stderr: listed.stderr,
      })
    }
    return listed.stdout
      .split('\0')
      .filter((line) => line.length > 1)
      .map((line) => {
        const name = line.slice(1)
        const kind = line[0] === 'd' ? 'dir' : line[0] === 'f' ? 'file' : 'other'
        return { name, path: `${dir === '/' ? '' : dir}/${name}`, type: kind }
      })
  }

  async pathExists(path: string, runAs?: string): Promise<boolean> {
    return await this.#test('-e', path, runAs)
  }

  async directoryExists(path: string, runAs?: string): Promise<boolean> {
    return await this.#test('-d', path, runAs)
  }

  createEditor(runAs?: string): Editor {
    this.#assertUsable()
    refuseRunAs(runAs)
    return createWorkspaceEditor(this.sandbox, (path) => resolveWorkspacePath(this.#root, path))
  }

  async materializeEntry(args: MaterializeEntryArgs): Promise<void> {
    this.#assertUsable()
    refuseRunAs(args.runAs)
    assertEntrySupported(args.entry, args.path, this.state.providerId)
    await materializeEntries(this.sandbox, [
      { absolutePath: resolveWorkspacePath(this.#root, args.path), entry: args.entry },
    ])
  }

  /** Writes a manifest's entries (the SDK's delta for an agent) into the workspace. */
  async applyManifest(manifest: Manifest, runAs?: string): Promise<void> {
    this.#assertUsable()
    refuseRunAs(runAs)
    assertManifestSupported(manifest, this.state.providerId)
    await materializeEntries(this.sandbox, placeManifestEntries(manifest, this.#root))
  }

  /**
   * Forwards the port with cordon's port forwarding (a host listener whose
   * connections reach the sandbox's loopback over its channel). A backend
   * without forwarding refuses with the SDK's exposed-port error.
   */
  async resolveExposedPort(port: number): Promise<ExposedPortEndpoint> {
    this.#assertUsable()
    const forwardPort = this.sandbox.forwardPort?.bind(this.sandbox)
    if (!forwardPort) {
      throw new SandboxExposedPortUnavailableError(
        `cordon (${this.state.providerId}) cannot forward ports: its channel to the sandbox carries no connections.`,
        { provider: 'cordon', port },
      )
    }
    let forward = this.#forwards.get(port)
    if (!forward) {
      forward = forwardPort(port)
      this.#forwards.set(port, forward)
      forward.catch(() => this.#forwards.delete(port))
    }
    const { host, port: hostPort } = await forward
    return recordExposedPortEndpoint(this.state, { host, port: hostPort, tls: false }, port)
  }

  /** Destroys the sandbox (and with it every forwarded port). Idempotent. */
  async shutdown(): Promise<void> {
    await this.sandbox.destroy()
  }

  async close(): Promise<void> {
    await this.sandbox.destroy()
  }

  async #test(flag: '-e' | '-d', path: string, runAs: string | undefined): Promise<boolean> {
    this.#assertUsable()
    refuseRunAs(runAs)
    const result = await this.sandbox.exec('test', [flag, resolveWorkspacePath(this.#root, path)])
    return result.exitCode === 0
  }

  #assertUsable(): void {
    if (this.sandbox.status === 'destroyed') {
      throw new SandboxLifecycleError(
        `cordon sandbox ${this.sandbox.id} is destroyed; create a new session.`,
        { provider: 'cordon', sandboxId: this.sandbox.id },
      )
    }
  }
}

/**
 * Every command runs as the sandbox's own unprivileged user; running as
 * another user would need accounts and privileges cordon never grants.
 */
function refuseRunAs(runAs: string | undefined): void {
  if (runAs !== undefined) {
    throw new SandboxUnsupportedFeatureError(
      `cordon runs every command as the sandbox user and cannot run as "${runAs}": remove runAs from the agent.`,
      { provider: 'cordon', feature: 'runAs', runAs },
    )
  }
}
