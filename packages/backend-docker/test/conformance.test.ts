import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { createDockerSandboxProvider } from '../src/index.js'
import { BUSYBOX_IMAGE } from './test-images.js'

for (const runtime of ['docker', 'runsc'] as const) {
  describeSandboxConformance({
    name: `container:${runtime}`,
    createProvider: () =>
      createDockerSandboxProvider({
        backend: { tier: 'container', runtime, image: BUSYBOX_IMAGE, labels: { 'test.suite': 'conformance' } },
        layout: { outputs: { source: { kind: 'ephemeral' } } },
      }),
    capabilities: ALL_CAPABILITIES,
  })
}
