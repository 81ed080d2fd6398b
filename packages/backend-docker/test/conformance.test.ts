import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { createDockerSandboxProvider } from '../src/index.js'

for (const runtime of ['docker', 'runsc'] as const) {
  describeSandboxConformance({
    name: `container:${runtime}`,
    createProvider: () =>
      createDockerSandboxProvider({
        backend: {
          tier: 'container',
          runtime,
          image: BUSYBOX_IMAGE,
          labels: testRunLabels(),
        },
        layout: { outputs: { source: { type: 'ephemeral' } } },
      }),
    // Under gVisor the host's OOM killer sees the whole sandbox as one process.
    // gVisor's inotify sees what the sandbox does, not what the host does to a shared directory.
    capabilities: {
      ...ALL_CAPABILITIES,
      survivesOutOfMemory: runtime === 'docker',
      externalWatch: runtime === 'docker',
    },
  })
}
