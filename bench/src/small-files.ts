/**
 * Scenario 7: one small file (1 KiB) written and read back on a running
 * sandbox: cordon's `writeFile` + `readFile` against the engine's archive API
 * (`PUT /archive` with a one-entry tar, then `GET /archive` and untar), the
 * path every Docker-based peer's file copy takes.
 */
import { randomBytes } from 'node:crypto'
import type { Readable } from 'node:stream'
import tar from 'tar-stream'
import { cordonProvider } from './cordon.js'
import { OUTPUTS_PATH } from './hardened-spec.js'
import { interleave } from './interleave.js'
import { createFloorSandbox, removeFloorSandbox } from './peers/dockerode-floor.js'
import type { Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

const CONTENT = randomBytes(1024)

function oneFileTar(name: string, content: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const pack = tar.pack()
    pack.entry({ name, size: content.byteLength, mode: 0o644, uid: 1000, gid: 1000 }, content)
    pack.finalize()
    const chunks: Buffer[] = []
    pack.on('data', (chunk: Buffer) => chunks.push(chunk))
    pack.on('end', () => resolve(Buffer.concat(chunks)))
    pack.on('error', reject)
  })
}

function firstEntry(archive: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const extract = tar.extract()
    let found: Buffer | undefined
    extract.on('entry', (_header, stream, next) => {
      const chunks: Buffer[] = []
      stream.on('data', (chunk: Buffer) => chunks.push(chunk))
      stream.on('end', () => {
        found ??= Buffer.concat(chunks)
        next()
      })
      stream.resume()
    })
    extract.on('finish', () => (found ? resolve(found) : reject(new Error('empty archive'))))
    extract.on('error', reject)
    archive.pipe(extract)
  })
}

export const smallFiles: Scenario = async ({ quick, log }) => {
  const provider = cordonProvider()
  const warmup = quick ? 3 : 5
  const iterations = quick ? 10 : 40
  const sandbox = await provider.create()
  const floor = await createFloorSandbox()
  try {
    const arms = [
      {
        name: 'cordon',
        run: async () => {
          await sandbox.writeFile('small.bin', CONTENT)
          const back = await sandbox.readFile('small.bin')
          if (!back.equals(CONTENT)) throw new Error('cordon: the file came back different')
        },
      },
      {
        name: 'archive API',
        run: async () => {
          await floor.container.putArchive(await oneFileTar('small.bin', CONTENT), {
            path: OUTPUTS_PATH,
          })
          const archive = (await floor.container.getArchive({
            path: `${OUTPUTS_PATH}/small.bin`,
          })) as unknown as Readable
          const back = await firstEntry(archive)
          if (!back.equals(CONTENT)) throw new Error('archive API: the file came back different')
        },
      },
    ]
    const samples = await interleave(arms, {
      warmup,
      iterations,
      onRun: (arm, round, ms, isWarmup) =>
        log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(2)} ms`),
    })
    const cordon = summarize(samples.get('cordon')!)
    const archive = summarize(samples.get('archive API')!)
    return {
      id: 'small-files',
      title: '7. Small file: write 1 KiB, read it back',
      method: `${warmup} warm-up + ${iterations} measured rounds per arm, round-robin, each arm on its own running hardened container. Timed: writing 1 KiB into the outputs mount and reading it back, bytes compared.`,
      tables: [
        {
          caption: '1 KiB write then read',
          arms: [
            { name: 'cordon (`writeFile` + `readFile`)', summary: cordon, unit: 'ms' },
            {
              name: 'archive API (`putArchive` + `getArchive`, dockerode)',
              summary: archive,
              unit: 'ms',
            },
          ],
        },
      ],
      comparisons: [
        {
          scenario: '7 small file',
          what: 'cordon / archive-API round trip',
          ratio: formatRatio(ratio(cordon, archive)),
          target: '≤ 0.20x',
          met: ratio(cordon, archive) <= 0.2,
        },
      ],
      notes: [],
      sections: [],
    }
  } finally {
    await provider.close()
    await removeFloorSandbox(floor)
  }
}
