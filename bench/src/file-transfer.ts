/**
 * Scenario 4: moving files in and out of a running sandbox. One 100 MiB file
 * up and down (with this process's peak memory growth while it moves), and
 * 2,000 small files up and down, for cordon, `docker cp` and
 * testcontainers' archive copy; under gVisor, cordon and `docker cp`.
 */
import { createHash, randomFillSync } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, posix, relative } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { CordonSandbox } from '@cordon/core'
import { type BenchRuntime, RUNC } from './bench-runtime.js'
import { cordonProvider } from './cordon.js'
import { removeContainer, removeVolume, runQuiet } from './engine.js'
import { OUTPUTS_PATH } from './hardened-spec.js'
import { DOWNLOAD_BASE, HostFileWriter } from './host-files.js'
import { interleave } from './interleave.js'
import { type MemoryGrowth, measureMemoryGrowth } from './memory-sampler.js'
import { DOCKER_CLI } from './peers/docker-cli.js'
import { createFloorSandbox, removeFloorSandbox } from './peers/dockerode-floor.js'
import { startTestcontainer } from './peers/testcontainers.js'
import type { ArmResult, Comparison, Scenario } from './scenario.js'
import { formatRatio, summarize } from './stats.js'
import { extractFiles, type HostFile, packFiles } from './tar-helpers.js'

const MiB = 1024 * 1024
export const BIG_SIZE = 100 * MiB
export const SMALL_COUNT = 2000
const SOURCE_1MIB = 'cordon, source read in 1 MiB pieces (information only)'
const DOWNLOAD_DISCARD = 'cordon, bytes counted, not written to a file (information only)'
const SMALL_DISCARD = 'cordon, files counted, not written to disk (information only)'
const SMALL_IN_MEMORY = 'cordon, contents already in memory (information only)'
/** cordon has no multi-file call, so a host writes small files several at a time. */
export const CORDON_FILE_CONCURRENCY = 8

type Direction = 'upload' | 'download'

/**
 * The batch file calls a sandbox may offer (`writeFiles`/`readFiles`, optional
 * members of the contract). Declared here so the bench measures them when the
 * installed cordon has them and falls back to one call per file when not.
 */
interface BatchFiles {
  writeFiles?(
    files: ReadonlyArray<
      { path: string; content: Uint8Array } | { path: string; hostPath: string }
    >,
  ): Promise<unknown>
  readFiles?(dir?: string): Promise<AsyncIterable<{ path: string; content: Uint8Array }>>
}

function medianAndMax(values: readonly number[]): string {
  const summary = summarize(values)
  return `${summary.median.toFixed(1)} (${summary.max.toFixed(1)}) MiB`
}

async function mapLimit<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const item = items[next++]!
        await task(item)
      }
    }),
  )
}

export async function makeInputs(
  dir: string,
): Promise<{ big: string; smallDir: string; smallFiles: HostFile[] }> {
  const big = join(dir, 'big.bin')
  const chunk = Buffer.alloc(4 * MiB)
  const out = createWriteStream(big)
  for (let written = 0; written < BIG_SIZE; written += chunk.length) {
    randomFillSync(chunk)
    if (!out.write(chunk)) await new Promise<void>((resolve) => out.once('drain', () => resolve()))
  }
  await new Promise<void>((resolve, reject) =>
    out.end((error?: Error | null) => (error ? reject(error) : resolve())),
  )
  const smallDir = join(dir, 'small')
  const smallFiles: HostFile[] = []
  for (let index = 0; index < SMALL_COUNT; index++) {
    // 512 B to 4 KiB, spread over 20 directories: source files, configs, notes
    // (gvisor-floors.ts writes the same inside a sandbox).
    const size = 512 + ((index * 7919) % 3585)
    const name = `small/d${String(index % 20).padStart(2, '0')}/f${String(index).padStart(4, '0')}.txt`
    const source = join(dir, name)
    await mkdir(dirname(source), { recursive: true })
    await writeFile(source, randomFillSync(Buffer.alloc(size)))
    smallFiles.push({ source, name, size })
  }
  return { big, smallDir, smallFiles }
}

async function sha256(path: string): Promise<string> {
  const hash = createHash('sha256')
  await pipeline(createReadStream(path), hash)
  return hash.digest('hex')
}

async function countFiles(dir: string): Promise<{ files: number; bytes: number }> {
  let files = 0
  let bytes = 0
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    files += 1
    bytes += (
      await stat(join(entry.parentPath ?? (entry as unknown as { path: string }).path, entry.name))
    ).size
  }
  return { files, bytes }
}

export function fileTransferScenario(variant: BenchRuntime): Scenario {
  return async ({ quick, log }) => {
    const runtime = variant.engineRuntime
    const work = await mkdtemp(join(tmpdir(), 'cordon-bench-files-'))
    const downloads = await mkdtemp(join(DOWNLOAD_BASE, 'cordon-bench-downloads-'))
    const provider = cordonProvider({ runtime })
    const bigRounds = quick ? { warmup: 1, iterations: 2 } : { warmup: 1, iterations: 7 }
    const smallRounds = quick ? { warmup: 0, iterations: 1 } : { warmup: 1, iterations: 7 }
    let sandbox: CordonSandbox | undefined
    let floor: Awaited<ReturnType<typeof createFloorSandbox>> | undefined
    let tc: Awaited<ReturnType<typeof startTestcontainer>> | undefined
    try {
      const inputs = await makeInputs(work)
      sandbox = await provider.create()
      floor = await createFloorSandbox(undefined, { runtime })
      tc = variant.everyPeer ? await startTestcontainer(runtime) : undefined
      const cordonSandbox = sandbox
      const batch = sandbox as CordonSandbox & BatchFiles
      const batchWrite = typeof batch.writeFiles === 'function'
      const batchRead = typeof batch.readFiles === 'function'
      // Without batch calls cordon moves small files one archive call each,
      // which the engine runs one at a time per container (about 50 ms each
      // here): one measured round in each direction is what fits the budget.
      const perFileRounds = { warmup: 0, iterations: 1 }
      const floorId = floor.container.id
      const started = tc
      const bigRemote = `${OUTPUTS_PATH}/big.bin`
      const smallRemote = `${OUTPUTS_PATH}/small`
      const download = (arm: string) => join(downloads, `dl-${arm.replace(/\W+/g, '-')}`)
      const memory = new Map<string, MemoryGrowth[]>()
      const remember = (key: string, growth: MemoryGrowth) => {
        const list = memory.get(key) ?? []
        list.push(growth)
        memory.set(key, list)
      }

      // ---- 100 MiB: upload, then download (the file is in every container from the uploads).
      const bigArm = (name: string, direction: Direction, move: () => Promise<void>) => ({
        name,
        prepare: async () => {
          if (direction === 'download') await rm(download(name), { recursive: true, force: true })
          if (direction === 'download') await mkdir(download(name), { recursive: true })
        },
        run: async () => {
          remember(`${direction}:${name}`, await measureMemoryGrowth(move))
        },
      })
      const bigUploads = [
        bigArm('cordon', 'upload', () =>
          cordonSandbox.writeFileStream('big.bin', createReadStream(inputs.big), {
            size: BIG_SIZE,
          }),
        ),
        // Informational: the same call with the source read in 1 MiB pieces, to
        // show how much of cordon's time is the host's own 64 KiB file reads.
        bigArm(SOURCE_1MIB, 'upload', () =>
          cordonSandbox.writeFileStream(
            'big.bin',
            createReadStream(inputs.big, { highWaterMark: MiB }),
            { size: BIG_SIZE },
          ),
        ),
        bigArm('docker cp', 'upload', () =>
          runQuiet(DOCKER_CLI, ['cp', inputs.big, `${floorId}:${bigRemote}`]),
        ),
        ...(started
          ? [
              bigArm('testcontainers', 'upload', () =>
                started.copyArchiveToContainer(
                  packFiles([{ source: inputs.big, name: 'big.bin', size: BIG_SIZE }]),
                  OUTPUTS_PATH,
                ),
              ),
            ]
          : []),
      ]
      const bigDownloads = [
        bigArm('cordon', 'download', async () => {
          await pipeline(
            Readable.from(await cordonSandbox.readFileStream('big.bin')),
            createWriteStream(join(download('cordon'), 'big.bin')),
          )
        }),
        // Informational: the bytes counted and dropped instead of written to a
        // file, to separate cordon's read path from this process's file writes.
        bigArm(DOWNLOAD_DISCARD, 'download', async () => {
          let bytes = 0
          for await (const chunk of await cordonSandbox.readFileStream('big.bin'))
            bytes += chunk.byteLength
          if (bytes !== BIG_SIZE) throw new Error(`read ${bytes} of ${BIG_SIZE} bytes`)
        }),
        bigArm('docker cp', 'download', () =>
          runQuiet(DOCKER_CLI, [
            'cp',
            `${floorId}:${bigRemote}`,
            join(download('docker cp'), 'big.bin'),
          ]),
        ),
        ...(started
          ? [
              bigArm('testcontainers', 'download', async () => {
                await extractFiles(
                  await started.copyArchiveFromContainer(bigRemote),
                  download('testcontainers'),
                  0,
                )
              }),
            ]
          : []),
      ]
      const onRun = (arm: string, round: number, ms: number, isWarmup: boolean) =>
        log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(0)} ms`)
      // The process's first large stream grows V8's young generation (a one-time
      // cost of Node, not of the code streaming): pay it with a plain file copy
      // before any arm runs, and report it, so every arm is measured warm.
      const nodeFirstStream = await measureMemoryGrowth(() =>
        pipeline(createReadStream(inputs.big), createWriteStream(join(work, 'first-stream.bin'))),
      )
      await rm(join(work, 'first-stream.bin'))
      const bigUp = await interleave(bigUploads, { ...bigRounds, onRun })
      const bigDown = await interleave(bigDownloads, { ...bigRounds, onRun })
      const sourceHash = await sha256(inputs.big)
      const integrity: string[] = []
      const arms = started ? ['cordon', 'docker cp', 'testcontainers'] : ['cordon', 'docker cp']
      for (const arm of arms) {
        const hash = await sha256(join(download(arm), 'big.bin'))
        if (hash !== sourceHash) integrity.push(`${arm}: 100 MiB round trip changed the bytes`)
      }

      // ---- 2,000 small files: upload into a fresh directory, then download into a fresh one.
      // Each upload round writes into a directory that does not exist yet, so
      // every arm creates 2,000 new files and `docker cp` does not nest the
      // directory inside an earlier copy (it writes as root, so the sandbox user
      // could not remove that copy). Each download reads the arm's last upload.
      const uploaded = new Map<string, string>()
      let uploads = 0
      const freshRemote = (arm: string): string => {
        uploads += 1
        const path = `${smallRemote}-${arm.replace(/\W+/g, '-')}-${uploads}`
        uploaded.set(arm, path)
        return path
      }
      const remoteOf = (arm: string): string => uploaded.get(arm)!
      const renamed = (target: string) =>
        inputs.smallFiles.map((file) => ({
          ...file,
          name: `${posix.basename(target)}/${file.name.slice('small/'.length)}`,
        }))
      const smallUploads = [
        {
          name: 'cordon',
          ...(batchWrite ? {} : { rounds: perFileRounds }),
          prepare: async () => renamed(freshRemote('cordon')),
          run: async (files: HostFile[]) => {
            if (batchWrite) {
              // As `docker cp` is given the directory: cordon is given the host
              // files and reads each as the batch is sent.
              await batch.writeFiles!(
                files.map((file) => ({ path: file.name, hostPath: file.source })),
              )
              return
            }
            await mapLimit(files, CORDON_FILE_CONCURRENCY, async (file) => {
              await cordonSandbox.writeFile(file.name, await readFile(file.source))
            })
          },
        },
        // Informational, with a batch write only: the same files read into
        // memory before the clock starts, to separate the transfer and the
        // sandbox's writes from this process's reads of 2,000 host files.
        ...(batchWrite
          ? [
              {
                name: SMALL_IN_MEMORY,
                prepare: async () =>
                  Promise.all(
                    renamed(freshRemote(SMALL_IN_MEMORY)).map(async (file) => ({
                      path: file.name,
                      content: await readFile(file.source),
                    })),
                  ),
                run: async (contents: Array<{ path: string; content: Uint8Array }>) => {
                  await batch.writeFiles!(contents)
                },
              },
            ]
          : []),
        {
          name: 'docker cp',
          prepare: async () => freshRemote('docker cp'),
          run: (target: string) =>
            runQuiet(DOCKER_CLI, ['cp', inputs.smallDir, `${floorId}:${target}`]),
        },
        ...(started
          ? [
              {
                name: 'testcontainers',
                prepare: async () => renamed(freshRemote('testcontainers')),
                run: (files: HostFile[]) =>
                  started.copyArchiveToContainer(packFiles(files), OUTPUTS_PATH),
              },
            ]
          : []),
      ]
      const smallDownloads = [
        {
          name: 'cordon',
          ...(batchRead ? {} : { rounds: perFileRounds }),
          prepare: () => rm(download('cordon-small'), { recursive: true, force: true }),
          run: async () => {
            const target = download('cordon-small')
            const source = remoteOf('cordon')
            const writer = new HostFileWriter()
            const save = (path: string, content: Uint8Array) =>
              writer.write(join(target, relative(source, path)), content)
            if (batchRead) {
              for await (const file of await batch.readFiles!(source))
                await save(file.path, file.content)
            } else {
              const entries = await cordonSandbox.listFiles(source)
              await mapLimit(entries, CORDON_FILE_CONCURRENCY, async (entry) => {
                await save(entry.path, await cordonSandbox.readFile(entry.path))
              })
            }
            await writer.finish()
          },
        },
        // Informational, with a batch read only: the files counted and dropped,
        // to separate cordon's read path from this process writing 2,000 files.
        ...(batchRead
          ? [
              {
                name: SMALL_DISCARD,
                run: async () => {
                  let files = 0
                  for await (const _file of await batch.readFiles!(remoteOf('cordon'))) files += 1
                  if (files !== SMALL_COUNT)
                    throw new Error(`read ${files} of ${SMALL_COUNT} files`)
                },
              },
            ]
          : []),
        {
          name: 'docker cp',
          prepare: () => rm(download('docker-cp-small'), { recursive: true, force: true }),
          run: () =>
            runQuiet(DOCKER_CLI, [
              'cp',
              `${floorId}:${remoteOf('docker cp')}`,
              download('docker-cp-small'),
            ]),
        },
        ...(started
          ? [
              {
                name: 'testcontainers',
                prepare: () =>
                  rm(download('testcontainers-small'), { recursive: true, force: true }),
                run: async () => {
                  await extractFiles(
                    await started.copyArchiveFromContainer(remoteOf('testcontainers')),
                    download('testcontainers-small'),
                    1,
                  )
                },
              },
            ]
          : []),
      ]
      const smallUp = await interleave(smallUploads, { ...smallRounds, onRun })
      const smallDown = await interleave(smallDownloads, { ...smallRounds, onRun })
      const smallBytes = inputs.smallFiles.reduce((sum, file) => sum + file.size, 0)
      for (const arm of arms.map((name) => `${name.replace(/\W+/g, '-')}-small`)) {
        const counted = await countFiles(download(arm))
        if (counted.files !== SMALL_COUNT || counted.bytes !== smallBytes) {
          integrity.push(
            `${arm}: downloaded ${counted.files} files, ${counted.bytes} bytes; expected ${SMALL_COUNT}, ${smallBytes}`,
          )
        }
      }

      // ---- Tables and ratios.
      const throughputTable = (
        samples: Map<string, number[]>,
        bytes: number,
        direction: Direction | undefined,
      ): ArmResult[] =>
        [
          ...arms,
          ...[SOURCE_1MIB, DOWNLOAD_DISCARD, SMALL_IN_MEMORY, SMALL_DISCARD].filter((name) =>
            samples.has(name),
          ),
        ].map((name) => {
          const summary = summarize(samples.get(name)!)
          const extra: Record<string, string> = {
            'MiB/s at median': (bytes / MiB / (summary.median / 1000)).toFixed(1),
          }
          if (direction) {
            const growth = memory.get(`${direction}:${name}`) ?? []
            extra['peak RSS growth: median (max) of runs'] = medianAndMax(
              growth.map((g) => g.rssMiB),
            )
            extra['peak heap+external growth: median (max)'] = medianAndMax(
              growth.map((g) => g.heapMiB),
            )
          }
          return { name: name === 'cordon' ? 'cordon' : name, summary, unit: 'ms', extra }
        })
      const versusBest = (label: string, samples: Map<string, number[]>): Comparison => {
        const cordon = summarize(samples.get('cordon')!).median
        const peers = arms
          .slice(1)
          .map((name) => ({ name, median: summarize(samples.get(name)!).median }))
        const best = peers.reduce((a, b) => (a.median <= b.median ? a : b))
        const value = best.median / cordon
        return {
          scenario: `4 files${variant.label}`,
          what: `${label}: cordon throughput / best peer (${best.name})`,
          ratio: formatRatio(value),
          target: '≥ 1.00x',
          met: value >= 1,
        }
      }
      const cordonMemory = [
        ...(memory.get('upload:cordon') ?? []),
        ...(memory.get('download:cordon') ?? []),
      ]
      const cordonRss = summarize(cordonMemory.map((g) => g.rssMiB))
      const cordonHeap = summarize(cordonMemory.map((g) => g.heapMiB))
      return {
        id: `file-transfer${variant.idSuffix}`,
        title: `4. File transfer: 100 MiB up and down, 2,000 small files up and down${variant.label}`,
        method: `100 MiB of random bytes from a host file to \`${bigRemote}\` (the tmpfs workspace volume) and back into a host file (every arm's downloads land in \`${DOWNLOAD_BASE}\`${DOWNLOAD_BASE === '/dev/shm' ? ", the host's memory: on disk, creating the 2,000 small files alone took longer than any arm's transfer and moved as much between runs" : ''}): ${bigRounds.warmup} warm-up + ${bigRounds.iterations} measured rounds per arm, round-robin. ${SMALL_COUNT} files of 512 B to 4 KiB (${(smallBytes / MiB).toFixed(1)} MiB in 20 directories) into a fresh directory and back out: ${smallRounds.warmup} warm-up + ${smallRounds.iterations} measured rounds for the peers${batchWrite && batchRead ? ' and cordon' : `, ${perFileRounds.warmup} + ${perFileRounds.iterations} for cordon's per-file calls (one round takes about 100 s)`}${runtime ? `; every container under \`runtime: '${runtime}'\`` : ''}. cordon uses \`writeFileStream\` (with \`size\`) / \`readFileStream\` for the big file and, for the small ones, ${batchWrite ? '`writeFiles` naming the host files (`hostPath`, one call)' : `\`writeFile\` per file, ${CORDON_FILE_CONCURRENCY} at a time (this cordon has no \`writeFiles\`)`} / ${batchRead ? '`readFiles` (one call)' : `\`listFiles\` + \`readFile\` per file, ${CORDON_FILE_CONCURRENCY} at a time (no \`readFiles\`)`}; \`docker cp\` copies the file or directory${started ? '; testcontainers uses `copyArchiveToContainer` / `copyArchiveFromContainer` with a tar packed from the host files and extracted where the downloads land' : ''}. Memory: this process's RSS and heap+external growth over the value just before the transfer, sampled every 20 ms, reported as the median (and maximum) over all runs including warm-ups, in a process warmed by one plain file copy (see below); the verdict is on the median, because single peaks swing with V8's collection timing.`,
        tables: [
          {
            caption: `100 MiB upload${variant.label}`,
            arms: throughputTable(bigUp, BIG_SIZE, 'upload'),
          },
          {
            caption: `100 MiB download${variant.label}`,
            arms: throughputTable(bigDown, BIG_SIZE, 'download'),
          },
          {
            caption: `${SMALL_COUNT} small files upload${variant.label}`,
            arms: throughputTable(smallUp, smallBytes, undefined),
          },
          {
            caption: `${SMALL_COUNT} small files download${variant.label}`,
            arms: throughputTable(smallDown, smallBytes, undefined),
          },
        ],
        comparisons: [
          versusBest('100 MiB upload', bigUp),
          versusBest('100 MiB download', bigDown),
          versusBest(`${SMALL_COUNT} files upload`, smallUp),
          versusBest(`${SMALL_COUNT} files download`, smallDown),
          {
            scenario: `4 files${variant.label}`,
            what: 'cordon peak RSS growth during a 100 MiB transfer: median of runs (max); heap+external likewise',
            ratio: `${cordonRss.median.toFixed(1)} (${cordonRss.max.toFixed(1)}) MiB; ${cordonHeap.median.toFixed(1)} (${cordonHeap.max.toFixed(1)}) MiB`,
            target: '< 32 MiB',
            met: cordonRss.median < 32,
          },
        ],
        notes: [
          started
            ? 'testcontainers\' `copyFilesToContainer` and `copyDirectoriesToContainer` extract at `/`, which Engine 20.10 refuses under a read-only root filesystem ("container rootfs is marked read-only"); its `copyArchiveToContainer(tar, target)` with a target inside the workspace volume is the call that works, so that is what is measured, with the tar streamed by tar-stream.'
            : 'testcontainers is left out under gVisor: the target names `docker cp`, which runs against the floor container of the same runtime.',
          `Node's own first-stream cost, measured before any arm with a plain \`fs\` copy of the same file (no cordon, no engine): RSS +${nodeFirstStream.rssMiB.toFixed(1)} MiB, heap+external +${nodeFirstStream.heapMiB.toFixed(1)} MiB. It is a one-time growth of V8's young generation in a fresh process; paying it first means every arm below is measured in a warmed process.`,
          "The information-only upload row passes cordon the same file read with `createReadStream(path, { highWaterMark: 1 MiB })` instead of the default 64 KiB pieces: the difference is the host's own file reads (one thread-pool round trip per piece), which `docker cp`, a Go program reading the file itself, does not pay.",
          "The information-only download row reads the same file through `readFileStream` and drops the bytes: what is left of cordon's time once this process's own file writes (64 KiB at a time through the thread pool) are taken out.",
          ...(batchWrite
            ? [
                "The information-only small-file upload row passes `writeFiles` the same 2,000 files already read into memory (read before the clock starts): what is left of cordon's time once this process's reads of the host files are taken out. cordon's own row names the host files (`hostPath`), as `docker cp` is given the directory, and reads each as the batch is sent.",
              ]
            : []),
          ...(batchRead
            ? [
                "The information-only small-file download row reads the 2,000 files through `readFiles` and drops them: the rest of cordon's download time is this process writing 2,000 files (with the same writer the testcontainers arm uses), which `docker cp` does in Go.",
              ]
            : []),
          "`docker cp` runs in its own process; its memory is not this process's, so its growth column only shows the cost of waiting for it.",
          'The memory verdict is on RSS growth, what the operating system charges the process. Heap+external also counts the 64 KiB Buffers a stream has finished with but V8 has not collected yet (no collection is forced: a forced full GC makes the next streamed transfer trigger several more full collections and run about twice as slowly), so it is reported alongside, not judged.',
          integrity.length === 0
            ? "Integrity: every 100 MiB download matched the source's SHA-256; every small-file download had all 2,000 files with the right total size."
            : `Integrity problems: ${integrity.join('; ')}`,
        ],
        sections: [],
      }
    } finally {
      await provider.close()
      if (floor) await removeFloorSandbox(floor)
      if (tc) {
        await removeContainer(tc.getId())
        await removeVolume(`${tc.getName().replace(/^\//, '')}-outputs`)
      }
      await rm(work, { recursive: true, force: true })
      await rm(downloads, { recursive: true, force: true })
    }
  }
}

/** Scenario 4 under the engine's default runtime (runc). */
export const fileTransfer: Scenario = fileTransferScenario(RUNC)
