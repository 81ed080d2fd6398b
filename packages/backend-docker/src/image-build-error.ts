import { type SandboxErrorOptions, SandboxOperationError } from '@cordon/core'
import { errorMarker, hasErrorMarker } from '@cordon/core/backend'

/** Core's marker scheme, so `isInstance` works across duplicated copies of this package. */
const imageBuildMarker = errorMarker('ImageBuildError')

/**
 * `buildImage` did not produce the image: a step failed (a `RUN` that exited
 * non-zero, a `COPY` of a file the context lacks), the Dockerfile is
 * invalid, a `FROM` image could not be pulled, or the build ran past its
 * `timeoutMs`. Nothing it made is left behind: the engine removed the
 * step's container, and cordon the images of the steps before it.
 */
export class ImageBuildError extends SandboxOperationError {
  protected readonly [imageBuildMarker] = true
  /** The name the image would have had. */
  readonly image: string
  /** The step that failed, counted from 1, when the engine had started one. */
  readonly step: number | undefined
  /** That step's instruction, e.g. `RUN make`. */
  readonly instruction: string | undefined
  /** The last lines of the build's output (at most 20), which usually say why. */
  readonly output: readonly string[]

  constructor(
    image: string,
    reason: string,
    details: {
      readonly step?: number
      readonly instruction?: string
      readonly output?: readonly string[]
    } = {},
    options: SandboxErrorOptions = {},
  ) {
    super(
      'buildImage',
      `${image}${details.step !== undefined ? ` (step ${details.step}: ${details.instruction})` : ''}: ${reason}`,
      options,
    )
    this.name = 'ImageBuildError'
    this.image = image
    this.step = details.step
    this.instruction = details.instruction
    this.output = [...(details.output ?? [])]
  }

  static override isInstance(value: unknown): value is ImageBuildError {
    return hasErrorMarker(value, imageBuildMarker)
  }
}
