import { describeSandboxConformance } from '@cordon/conformance'
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
  // The declaration (provider.enforcement) says a claim cannot change the
  // profile, so memory and process limits are refused here and the profile's
  // own limits are proved in enforcement.test.ts; the sandbox keeps an
  // interface (the agent is reached over TCP), so deny-all is not "loopback
  // only", and what it does hold is proved there too.
})
