import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { closeTestArmStandin, type TestArmStandin } from '@cordon/test-support'
import { afterAll, beforeAll } from 'vitest'
import { startTestStandin, testProvider } from './standin-fixture.js'

let standin: TestArmStandin | undefined
beforeAll(async () => {
  standin = await startTestStandin()
})
afterAll(() => closeTestArmStandin(standin))

describeSandboxConformance({
  name: 'container:aci-standby-pool (ARM stand-in)',
  createProvider: () => testProvider(standin!),
  // A claim cannot change the profile: memory and process limits other than
  // the profile's are refused, so the suite's own values (64 MiB, 24) cannot
  // be asked for; the profile's limits are proved in enforcement.test.ts. The
  // sandbox keeps an interface (the agent is reached over TCP), so deny-all is
  // not "loopback only"; what it does hold is proved there too. ARM has no
  // operation that freezes a container group's processes: pause is refused.
  capabilities: {
    ...ALL_CAPABILITIES,
    memoryLimit: false,
    oomReporting: false,
    survivesOutOfMemory: false,
    processLimit: false,
    denyAllNetwork: false,
    terminal: false,
    pause: false,
    externalWatch: false,
    measuredUsage: ALL_CAPABILITIES.measuredUsage,
  },
})
