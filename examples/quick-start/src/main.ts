import { createSandboxProvider } from '@cordon/sandbox' // plus: npm install @cordon/backend-docker

const provider = createSandboxProvider({
  // Any image with the commands you run; the quick start builds this one locally.
  backend: { tier: 'container', runtime: 'runsc', image: 'cordon-test/busybox:latest' },
  layout: { outputs: { source: { type: 'ephemeral' } } },
  defaultMemoryLimitMb: 512,
})
const sandbox = await provider.create({ env: { TASK: '42' } })
const result = await sandbox.exec('sh', ['-c', 'echo "task $TASK: $((6 * 7))"'], {
  timeout: 10_000,
})
await sandbox.writeFile('input.csv', 'a,b\n1,2\n')
const input = await sandbox.readFile('input.csv')
console.log(result.stdout.trim(), '|', input.toString('utf8').split('\n')[1])
await sandbox.destroy()
await provider.close()
