import type { SandboxImagePullProgress } from '@cordon/core'
import type { EngineProgressMessage } from './engine-progress-stream.js'

interface LayerState {
  done: boolean
  current: number
  total: number
}

/**
 * Tallies a pull's messages into layers and bytes. The engine reports each
 * layer by a short id: "Pulling fs layer", "Downloading" with a byte count,
 * "Download complete", "Extracting", "Pull complete", or "Already exists"
 * for one it had.
 */
export class PullProgress {
  private readonly layers = new Map<string, LayerState>()

  /** Takes one message; true if it changed the tally. */
  take(message: EngineProgressMessage): boolean {
    const { id, status } = message
    // The first message names the tag ("Pulling from team/tool", id "1"), not a layer.
    if (!id || !status || status.startsWith('Pulling from')) return false
    let layer = this.layers.get(id)
    if (!layer) {
      layer = { done: false, current: 0, total: 0 }
      this.layers.set(id, layer)
    }
    const detail = message.progressDetail
    if (status === 'Downloading' && detail) {
      layer.current = detail.current ?? layer.current
      layer.total = detail.total ?? layer.total
    } else if (status === 'Download complete' || status === 'Verifying Checksum') {
      layer.current = layer.total
    } else if (status === 'Pull complete' || status === 'Already exists') {
      layer.current = layer.total
      layer.done = true
    }
    return true
  }

  get current(): SandboxImagePullProgress {
    let layersDone = 0
    let downloadedBytes = 0
    let totalBytes = 0
    for (const layer of this.layers.values()) {
      if (layer.done) layersDone++
      downloadedBytes += layer.current
      totalBytes += layer.total
    }
    return { layers: this.layers.size, layersDone, downloadedBytes, totalBytes }
  }
}
