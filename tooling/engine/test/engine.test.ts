import { PassThrough } from 'node:stream'
import { testRunLabels } from '@cordon/test-support'
import Docker from 'dockerode'
import { describe, expect, it } from 'vitest'

const docker = new Docker({ socketPath: '/var/run/docker.sock' })

/** Runs `cmd` in a hardened, networkless container and returns its output and exit code. */
async function runHardened(image: string, runtime: 'runc' | 'runsc', cmd: string[]) {
  const container = await docker.createContainer({
    Image: image,
    Cmd: cmd,
    User: '1000:1000',
    Labels: testRunLabels(),
    HostConfig: {
      Runtime: runtime,
      NetworkMode: 'none',
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges:true'],
      ReadonlyRootfs: true,
      Tmpfs: { '/tmp': 'rw,size=16m' },
      PidsLimit: runtime === 'runc' ? 64 : 1024,
      Memory: 256 * 1024 * 1024,
      MemorySwap: 256 * 1024 * 1024,
      Init: true,
    },
  })
  try {
    const stream = await container.attach({ stream: true, stdout: true, stderr: true })
    const stdout = new PassThrough()
    const chunks: Buffer[] = []
    stdout.on('data', (chunk: Buffer) => chunks.push(chunk))
    docker.modem.demuxStream(stream, stdout, new PassThrough())
    await container.start()
    const { StatusCode } = (await container.wait()) as { StatusCode: number }
    return { exitCode: StatusCode, stdout: Buffer.concat(chunks).toString('utf8') }
  } finally {
    await container.remove({ force: true })
  }
}

describe('the local engine and test images', () => {
  it('answers on its socket with API 1.41 or newer', async () => {
    const version = await docker.version()
    expect(Number(version.ApiVersion)).toBeGreaterThanOrEqual(1.41)
  })

  it('has the runsc (gVisor) runtime registered', async () => {
    const info = (await docker.info()) as { Runtimes: Record<string, unknown> }
    expect(Object.keys(info.Runtimes)).toContain('runsc')
  })

  for (const runtime of ['runc', 'runsc'] as const) {
    it(`runs the busybox image hardened as a non-root user under ${runtime}`, async () => {
      const result = await runHardened('cordon-test/busybox:latest', runtime, [
        'sh',
        '-c',
        'id -u; touch /home/sandbox/x 2>&1; echo done',
      ])
      expect(result.exitCode).toBe(0)
      expect(result.stdout).toMatch(/^1000\n/)
      expect(result.stdout).toMatch(/Read-only file system/)
    })

    it(`runs node in the node image under ${runtime}`, async () => {
      const result = await runHardened('cordon-test/node:latest', runtime, [
        'node',
        '-e',
        'console.log(process.version, process.getuid())',
      ])
      expect(result.exitCode).toBe(0)
      expect(result.stdout).toBe(`${process.version} 1000\n`)
    })
  }
})
