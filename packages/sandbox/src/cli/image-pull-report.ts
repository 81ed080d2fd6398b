import type { SandboxEvent, SandboxImagePullProgress } from '@cordon/core'

/** Progress lines on a stream that is not a terminal come at most this often. */
const LINE_INTERVAL_MS = 1000

function megabytes(bytes: number): string {
  return (bytes / 1_000_000).toFixed(1)
}

function described(pull: SandboxImagePullProgress | undefined): string {
  if (!pull) return 'starting'
  return `${pull.layersDone}/${pull.layers} layers, ${megabytes(pull.downloadedBytes)}/${megabytes(pull.totalBytes)} MB`
}

/**
 * Shows a sandbox image being pulled, as `docker run` does, on the command
 * line's stderr: a line when it starts and ends, and progress in between
 * (one line rewritten in place on a terminal, else a line a second). Every
 * other event is not its business.
 */
export function imagePullReporter(
  write: (text: string) => void,
  terminal: boolean,
): (event: SandboxEvent) => void {
  let lineAt = 0
  let open = false
  const closeLine = (): void => {
    if (open) write('\n')
    open = false
  }
  return (event) => {
    if (event.type !== 'lifecycle' || !event.phase.startsWith('image.pull.')) return
    const image = event.image ?? 'the image'
    switch (event.phase) {
      case 'image.pull.start':
        write(`cordon: pulling ${image}\n`)
        return
      case 'image.pull.progress': {
        const text = `cordon: pulling ${image}: ${described(event.pull)}`
        if (terminal) {
          write(`\r\x1b[K${text}`)
          open = true
          return
        }
        const now = Date.now()
        if (now - lineAt < LINE_INTERVAL_MS) return
        lineAt = now
        write(`${text}\n`)
        return
      }
      case 'image.pull.end':
        closeLine()
        write(
          `cordon: pulled ${image} (${described(event.pull)}) in ${((event.durationMs ?? 0) / 1000).toFixed(1)} s\n`,
        )
        return
      default:
        closeLine()
    }
  }
}
