import { describeSandboxConformance } from '@cordon/conformance'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { createDockerSandboxProvider } from '../src/index.js'
import { describeAlongside } from './run-alongside.js'

for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`the Docker backend under ${runtime}`, () => {
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
    })
  })
}
