import Dockerode from 'dockerode'

/** Every engine resource a test run makes carries this label, so the run can prove it leaked nothing. */
export const TEST_RUN_LABEL = 'cordon-test.run'
export const TEST_RUN_ID = process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}`

export const docker = new Dockerode()

/** Containers and networks of this test run that still exist. */
export async function engineLeftovers(): Promise<string[]> {
  const filters = { label: [`${TEST_RUN_LABEL}=${TEST_RUN_ID}`] }
  const containers = await docker.listContainers({ all: true, filters })
  const networks = await docker.listNetworks({ filters })
  return [
    ...containers.map((info) => `container ${info.Names[0] ?? info.Id}`),
    ...networks.map((network) => `network ${network.Name}`),
  ]
}
