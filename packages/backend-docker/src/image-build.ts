import { randomUUID } from 'node:crypto'
import { readFile, stat } from 'node:fs/promises'
import { isAbsolute, join, normalize } from 'node:path'
import { type ContainerBackendConfig, imageReferenceProblem } from '@cordon/builtin-backends'
import { type SandboxConfigIssue, SandboxConfigValidationError, SandboxError } from '@cordon/core'
import { LABEL, ownerLabels, throwIfAborted, withDeadline } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { buildContextEntries, packBuildContext } from './build-context.js'
import { type LabelledDockerfile, labelEveryStage } from './build-stage-labels.js'
import { removeContainerAndWait } from './container-removal.js'
import { connectEngine } from './engine-connection.js'
import { engineMessage, isNotFound, isUnreachable, translateEngineError } from './engine-errors.js'
import { followEngineProgress } from './engine-progress-stream.js'
import { ImageBuildError } from './image-build-error.js'
import { engineRegistryConfig } from './registry-auth.js'

export interface ImageBuildOptions {
  /**
   * The build context: a directory. Everything in it goes to the engine
   * except what its `.dockerignore` excludes; links are sent as links.
   */
  readonly context: string
  /** The name the image gets, e.g. `agent-tools:1`. */
  readonly tag: string
  /** The Dockerfile, relative to the context (default `Dockerfile`). */
  readonly dockerfile?: string
  /** Values for the Dockerfile's `ARG`s. */
  readonly buildArgs?: Readonly<Record<string, string>>
  /** Extra labels on the image; `cordon.*` keys are reserved. */
  readonly labels?: Readonly<Record<string, string>>
  /** Ends the build on the engine; what it made so far is removed. */
  readonly signal?: AbortSignal
  /** Budget for the whole build, in ms (default: none). */
  readonly timeoutMs?: number
  /** Called with each line of the build's output, as the engine reports it. */
  readonly onProgress?: (progress: ImageBuildProgress) => void
}

export interface ImageBuildProgress {
  /** The step the line belongs to, counted from 1, and how many the Dockerfile has. */
  readonly step: number | undefined
  readonly steps: number | undefined
  /** One line of output: a step's header (`Step 2/4 : RUN make`) or what the step printed. */
  readonly line: string
}

export interface BuiltImage {
  readonly tag: string
  /** The image's id, `sha256:…`. */
  readonly id: string
}

/** The label every image `buildImage` makes carries, besides `cordon.managed`. */
export const BUILT_IMAGE_ROLE = 'image'

/**
 * The label of the images a build's steps make and of its step containers
 * (build-stage-labels.ts): what a killed build left, which `cordon gc`
 * removes once no build is under way (garbage-collect.ts).
 */
export const BUILD_STEP_ROLE = 'build-step'

/**
 * The label of a build's record: a volume with its host's owner labels that
 * lives as long as the build, so that gc can tell a build under way (whose
 * step images it must leave) from one whose host is gone.
 */
export const BUILD_RECORD_ROLE = 'build'

/** Lines of output an {@link ImageBuildError} keeps. */
const KEPT_OUTPUT_LINES = 20

/**
 * Builds an image from a Dockerfile, the way `docker build` does, on the
 * engine the config names: the context directory is packed and streamed to
 * the engine's build API, `FROM` images are pulled with `registryAuth`, and
 * the image is labelled `cordon.managed=1`, `cordon.role=image`. A sandbox
 * provider can then name it as its `image`.
 *
 * Fails with {@link ImageBuildError} when a step fails (or the budget runs
 * out), `SandboxConfigValidationError` for unusable options, and
 * `SandboxAbortedError` on the signal; in each case the engine's step
 * container is removed, and so are the images of the steps this build ran.
 */
export async function buildImage(
  config: Pick<ContainerBackendConfig, 'registryAuth' | 'socketPath' | 'host' | 'port' | 'tls'>,
  options: ImageBuildOptions,
): Promise<BuiltImage> {
  throwIfAborted(options.signal, 'buildImage')
  const dockerfile = await checkOptions(options)
  const entries = await buildContextEntries(options.context)
  const engine = connectEngine(config)
  const scope = { ...options.labels, [LABEL.managed]: '1' }
  const labelled = labelEveryStage(await readFile(join(options.context, dockerfile), 'utf8'), {
    ...scope,
    [LABEL.role]: BUILD_STEP_ROLE,
  })
  const build = new BuildOutput(options, labelled)
  let record: Docker.Volume | undefined
  return withDeadline(
    async (signal) => {
      // Before anything the build makes: a gc from here on leaves this build's step images alone.
      record = engine.docker.getVolume(
        (
          await engine.docker.createVolume({
            Name: `cordon-build-${randomUUID()}`,
            Labels: { ...ownerLabels('cordon-build'), ...scope, [LABEL.role]: BUILD_RECORD_ROLE },
          })
        ).name,
      )
      const stream = (await engine.docker.buildImage(
        packBuildContext(options.context, entries, dockerfile, labelled.dockerfile),
        {
          t: options.tag,
          dockerfile,
          buildargs: { ...options.buildArgs },
          labels: { ...scope, [LABEL.role]: BUILT_IMAGE_ROLE },
          // The step container goes even when its step fails.
          rm: true,
          forcerm: true,
          registryconfig: engineRegistryConfig(config.registryAuth),
          abortSignal: signal,
        } as Docker.ImageBuildOptions,
      )) as NodeJS.ReadableStream
      await followEngineProgress(stream, (message) => build.take(message))
      build.flush()
      if (!build.id) throw build.error('the engine ended the build without an image')
      return { tag: options.tag, id: build.id }
    },
    {
      timeoutMs: options.timeoutMs,
      signal: options.signal,
      operation: 'buildImage',
      onTimeout: () => build.error(`did not finish within ${options.timeoutMs} ms`),
      cleanup: () => removeBuildLeftovers(engine.docker, build),
    },
  )
    .catch((error: unknown) => {
      if (SandboxError.isInstance(error)) throw error
      if (isUnreachable(error)) {
        throw translateEngineError(error, 'container:docker', engine.description, 'buildImage')
      }
      throw build.error(engineMessage(error).trim(), error)
    })
    .finally(async () => {
      // After the leftovers are gone; one this misses (engine lost) goes with its owner, by gc.
      await record?.remove().catch(() => {})
    })
}

async function checkOptions(options: ImageBuildOptions): Promise<string> {
  const issues: SandboxConfigIssue[] = []
  const dockerfile = normalize(options.dockerfile ?? 'Dockerfile')
  if (typeof options.tag !== 'string' || options.tag.trim() === '') {
    issues.push({ path: 'tag', message: 'name the image to build, e.g. "agent-tools:1"' })
  } else {
    const problem = options.tag.includes('@')
      ? `"${options.tag}" names a digest; a build is tagged name[:tag]`
      : imageReferenceProblem(options.tag)
    if (problem) issues.push({ path: 'tag', message: problem })
  }
  if (isAbsolute(dockerfile) || dockerfile.startsWith('..')) {
    issues.push({ path: 'dockerfile', message: 'must be a path inside the context' })
  }
  for (const [key, value] of Object.entries(options.labels ?? {})) {
    if (key.startsWith('cordon.')) {
      issues.push({
        path: `labels.${key}`,
        message: 'label keys starting with "cordon." are reserved',
      })
    } else if (/[\r\n]/.test(key + String(value))) {
      // Written into the Dockerfile as a LABEL instruction (build-stage-labels.ts), which is one line.
      issues.push({ path: `labels.${key}`, message: 'a label cannot hold a line break' })
    }
  }
  if (
    options.timeoutMs !== undefined &&
    !(Number.isInteger(options.timeoutMs) && options.timeoutMs > 0)
  ) {
    issues.push({ path: 'timeoutMs', message: 'must be a positive whole number of ms' })
  }
  const context = await stat(options.context).catch(() => undefined)
  if (!context?.isDirectory()) {
    issues.push({ path: 'context', message: `${options.context} is not a directory` })
  } else if (issues.length === 0) {
    const file = await stat(join(options.context, dockerfile)).catch(() => undefined)
    if (!file?.isFile()) {
      issues.push({ path: 'dockerfile', message: `the context has no file ${dockerfile}` })
    }
  }
  if (issues.length > 0) throw new SandboxConfigValidationError('image build options', issues)
  return dockerfile
}

/**
 * Follows a classic build's output: its lines, the step each belongs to,
 * the images the steps make (one per step that ran rather than came from
 * the cache), and the final image's id.
 */
class BuildOutput {
  id: string | undefined
  /** Images this build's steps made, oldest first. */
  readonly madeImages: string[] = []
  /** The container of the step under way, if it runs one. */
  stepContainer: string | undefined
  private step: number | undefined
  private steps: number | undefined
  private instruction: string | undefined
  private stepCached = false
  /** The step under way is a `LABEL` cordon added: its lines are not the Dockerfile's to show. */
  private stepAdded = false
  /** Steps cordon added so far, which the step numbers shown leave out. */
  private addedSteps = 0
  private partial = ''
  private readonly recent: string[] = []

  constructor(
    private readonly options: ImageBuildOptions,
    private readonly labelled: LabelledDockerfile,
  ) {}

  take(message: { stream?: string; aux?: { ID?: string } }): void {
    if (message.aux?.ID) this.id = message.aux.ID
    if (message.stream === undefined) return
    // A step's header and its newline come as separate messages: lines are joined first.
    const text = this.partial + message.stream
    const lines = text.split('\n')
    this.partial = lines.pop() ?? ''
    for (const line of lines) this.line(line)
  }

  flush(): void {
    if (this.partial !== '') this.line(this.partial)
    this.partial = ''
  }

  private line(line: string): void {
    const header = /^Step (\d+)\/(\d+) : (.*)$/.exec(line)
    if (header) {
      this.stepCached = false
      this.stepAdded = header[3]!.trim() === this.labelled.instruction
      if (this.stepAdded) {
        this.addedSteps++
        return
      }
      // Numbered as the Dockerfile counts its steps.
      this.step = Number(header[1]) - this.addedSteps
      this.steps = Number(header[2]) - this.labelled.added
      this.instruction = header[3]
      line = `Step ${this.step}/${this.steps} : ${this.instruction}`
    } else if (line === ' ---> Using cache') {
      this.stepCached = true
    } else if (line.startsWith(' ---> Running in ')) {
      this.stepContainer = line.slice(' ---> Running in '.length).trim()
    } else if (line.startsWith('Removing intermediate container ')) {
      this.stepContainer = undefined
    } else {
      const result = /^ ---> ([0-9a-f]{12,64})$/.exec(line)
      // A FROM step's result is its base image, and a cached step's an image an earlier build made.
      // (A step cordon added comes right after a FROM, and makes an image of its own.)
      const fromStep = !this.stepAdded && /^FROM\s/i.test(this.instruction ?? '')
      if (result && !this.stepCached && !fromStep) {
        this.madeImages.push(result[1]!)
      }
    }
    if (this.stepAdded) return
    this.recent.push(line)
    if (this.recent.length > KEPT_OUTPUT_LINES) this.recent.shift()
    this.options.onProgress?.({ step: this.step, steps: this.steps, line })
  }

  error(reason: string, cause?: unknown): ImageBuildError {
    return new ImageBuildError(
      this.options.tag,
      reason,
      {
        ...(this.step !== undefined ? { step: this.step, instruction: this.instruction } : {}),
        output: this.recent,
      },
      cause === undefined ? {} : { cause },
    )
  }
}

/**
 * Removes what a failed build made: the container of the step under way
 * (the engine removes it as well, but only once it notices the build has
 * ended, and the images below cannot go while it exists), then the images
 * of the steps that ran, newest first. An image that has since been tagged,
 * or that another image or a container now builds on, is someone's: the
 * engine refuses to remove it, and it stays.
 */
async function removeBuildLeftovers(docker: Docker, build: BuildOutput): Promise<void> {
  // Gone before the images: the step's image cannot be removed while its container exists.
  if (build.stepContainer)
    await removeContainerAndWait(docker.getContainer(build.stepContainer)).catch(() => {})
  for (const id of [...build.madeImages].reverse()) {
    const image = docker.getImage(id)
    const info = await image.inspect().catch((error: unknown) => {
      if (isNotFound(error)) return undefined
      throw error
    })
    const tags = (info?.RepoTags ?? []).filter((tag) => tag !== '<none>:<none>')
    if (!info || tags.length > 0) continue
    await image.remove({ noprune: true }).catch(() => {})
  }
}
