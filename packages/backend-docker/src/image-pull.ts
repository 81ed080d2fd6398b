import type { RegistryCredential } from '@cordon/builtin-backends'
import {
  SandboxAbortedError,
  SandboxError,
  SandboxImagePullError,
  type SandboxLifecycleEvent,
} from '@cordon/core'
import { throwIfAborted } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { engineMessage, isNotFound, isUnreachable, translateEngineError } from './engine-errors.js'
import { EngineStreamError, followEngineProgress } from './engine-progress-stream.js'
import { type ImageReference, isCordonTestImage, parseImageReference } from './image-reference.js'
import { PullProgress } from './pull-progress.js'
import { engineAuthFor } from './registry-auth.js'

/** Progress events come at most this often (layer counts and bytes change many times a second). */
const PROGRESS_INTERVAL_MS = 250

/** What a registry says when it wants credentials, or refuses the ones it got. */
const AUTH_REFUSAL = /unauthorized|authentication required|no basic auth|denied|forbidden/i

export interface ImagePullerOptions {
  readonly docker: Docker
  /** The engine as the person set it, for errors (EngineConnection's `description`). */
  readonly engine: string
  /** `container:docker` or `container:runsc`, for errors and events. */
  readonly backend: string
  readonly registryAuth?: Readonly<Record<string, RegistryCredential>>
  /** Receives the `image.pull.*` events; must not throw. */
  readonly emit: (event: SandboxLifecycleEvent) => void
}

interface SharedPull {
  readonly done: Promise<void>
  readonly controller: AbortController
  waiters: number
  settled: boolean
}

/**
 * Brings images onto the engine the way `docker run` does: a missing image
 * is pulled, with the credential `registryAuth` holds for its registry, and
 * its progress reported as `image.pull.*` events. Callers waiting for the
 * same image share one pull; it goes on while any of them still waits, and
 * ends on the engine (the request is closed) when the last one gives up.
 */
export class ImagePuller {
  private readonly pulls = new Map<string, SharedPull>()

  constructor(private readonly options: ImagePullerOptions) {}

  /** Resolves once the engine has `image`, pulling it if it does not. */
  async ensure(image: string, signal: AbortSignal): Promise<void> {
    throwIfAborted(signal, 'image pull')
    if (await this.present(image)) return
    await this.pull(image, signal)
  }

  /** Pulls `image` (or joins the pull of it under way); resolves once the engine has it. */
  async pull(image: string, signal: AbortSignal): Promise<void> {
    throwIfAborted(signal, 'image pull')
    let pull = this.pulls.get(image)
    if (!pull) pull = this.start(image)
    const shared = pull
    shared.waiters++
    let onAbort: (() => void) | undefined
    try {
      await Promise.race([
        shared.done,
        new Promise<never>((_, reject) => {
          // A create's deadline aborts with the error it ends in (its timeout, naming the pull);
          // any other abort, a plain abort() included, is this pull's SandboxAbortedError.
          onAbort = () =>
            reject(
              SandboxError.isInstance(signal.reason)
                ? signal.reason
                : new SandboxAbortedError('image pull', { cause: signal.reason }),
            )
          if (signal.aborted) onAbort()
          else signal.addEventListener('abort', onAbort, { once: true })
        }),
      ])
    } finally {
      if (onAbort) signal.removeEventListener('abort', onAbort)
      shared.waiters--
      if (shared.waiters === 0 && !shared.settled) {
        // Nobody waits any more: the pull ends, and the next caller starts afresh.
        if (this.pulls.get(image) === shared) this.pulls.delete(image)
        shared.controller.abort()
      }
    }
  }

  private start(image: string): SharedPull {
    const controller = new AbortController()
    const shared: SharedPull = {
      controller,
      waiters: 0,
      settled: false,
      done: this.run(parseImageReference(image), controller.signal).finally(() => {
        shared.settled = true
        if (this.pulls.get(image) === shared) this.pulls.delete(image)
      }),
    }
    shared.done.catch(() => {})
    this.pulls.set(image, shared)
    return shared
  }

  private async present(image: string): Promise<boolean> {
    try {
      await this.options.docker.getImage(image).inspect()
      return true
    } catch (error) {
      if (isNotFound(error)) return false
      throw translateEngineError(error, this.options.backend, this.options.engine, 'image pull')
    }
  }

  private async run(reference: ImageReference, signal: AbortSignal): Promise<void> {
    const { docker, backend } = this.options
    const image = reference.name
    if (isCordonTestImage(reference)) {
      throw new SandboxImagePullError(
        image,
        reference.registry,
        backend,
        "the engine does not have it, and cordon's own test images are never pulled (a registry's image of that name is not cordon's): they are built on the engine by tooling/engine/setup.sh in cordon's repository. Run that script, or name another image",
      )
    }
    const auth = engineAuthFor(this.options.registryAuth, reference.registry)
    const startedAt = Date.now()
    const event = (
      phase: SandboxLifecycleEvent['phase'],
      fields: Partial<SandboxLifecycleEvent> = {},
    ): void =>
      this.options.emit({
        type: 'lifecycle',
        phase,
        backend,
        timestamp: Date.now(),
        image,
        ...fields,
      })
    event('image.pull.start')
    const progress = new PullProgress()
    let reportedAt = 0
    try {
      const stream = (await docker.createImage(auth as Docker.AuthConfig, {
        fromImage: reference.pullName,
        abortSignal: signal,
      })) as NodeJS.ReadableStream
      await followEngineProgress(stream, (message) => {
        if (!progress.take(message)) return
        const now = Date.now()
        if (now - reportedAt < PROGRESS_INTERVAL_MS) return
        reportedAt = now
        event('image.pull.progress', { pull: progress.current })
      })
      // A stream cut short ends like a finished one: only the image being there counts.
      if (!(await this.present(image))) {
        throw new EngineStreamError('the engine ended the pull without the image')
      }
    } catch (error) {
      const failure = this.failure(error, reference, auth !== undefined, signal)
      event('image.pull.failed', {
        durationMs: Date.now() - startedAt,
        error: { name: failure.name, code: failure.code, message: failure.message },
      })
      throw failure
    }
    event('image.pull.end', { durationMs: Date.now() - startedAt, pull: progress.current })
  }

  private failure(
    error: unknown,
    reference: ImageReference,
    withCredential: boolean,
    signal: AbortSignal,
  ): SandboxError {
    const { backend, engine } = this.options
    if (signal.aborted) return new SandboxAbortedError('image pull', { cause: signal.reason })
    if (isUnreachable(error))
      return translateEngineError(error, backend, engine, 'image pull') as SandboxError
    let reason = engineMessage(error).trim()
    if (AUTH_REFUSAL.test(reason)) {
      reason += withCredential
        ? `; the registry refused the credential registryAuth gives for ${reference.registry}`
        : `; registryAuth has no credential for ${reference.registry}`
    }
    return new SandboxImagePullError(reference.name, reference.registry, backend, reason, {
      cause: error,
    })
  }
}
