import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { createDockerSandboxProvider } from '../src/index.js'
import { BUSYBOX_IMAGE } from './test-images.js'
import { TEST_RUN_ID, TEST_RUN_LABEL } from './test-run.js'

for (const runtime of ['docker', 'runsc'] as const) {
  describeSandboxConformance({
    name: `container:${runtime}`,
    createProvider: () =>
      createDockerSandboxProvider({
        backend: {
          tier: 'container',
          runtime,
          image: BUSYBOX_IMAGE,
          labels: { [TEST_RUN_LABEL]: TEST_RUN_ID },
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
