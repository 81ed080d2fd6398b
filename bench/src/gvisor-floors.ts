/**
 * Scenario 16: the floors inside gVisor under the rows cordon misses there
 * (issue 30). cordon's agent runs inside the sandbox, so whatever it does
 * there costs what gVisor charges for it; `docker cp` and the engine's exec
 * are the peers those rows divide by. This scenario measures, in one bare
 * hardened runsc container, what the agent's work alone costs with nothing
 * of cordon around it, timed by a Node program inside the sandbox (so no
 * transport is counted), side by side with those peers:
 *
 * - 100 MiB written in 1 MiB writes into a `--tmpfs` mount (where cordon's
 *   `ephemeral` directories live: gVisor keeps them in its own memory) and
 *   into a tmpfs volume (the host's tmpfs, served to the sandbox through
 *   gVisor's gofer), against `docker cp` of the same file;
 * - 2,000 small files written and read with the system calls the agent makes
 *   for each (see `packages/agent/src/file-write.ts` and
 *   `file-batch-read.ts`), against `docker cp` of the same files;
 * - `/bin/true` started from a shell loop, and `node -e 0`, against one bare
 *   dockerode exec of `true`.
 *
 * The file rows are the best the matching cordon row could reach if cordon
 * added nothing to its agent's work: the peer's time over the floor's. The
 * process rows are informational: a shell forks (cordon's launcher uses
 * vfork, which spares copying the address space), and cordon's create pays
 * Node's start where the floor pays an exec.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import type Docker from 'dockerode'
import { docker, runQuiet } from './engine.js'
import { BIG_SIZE, makeInputs, SMALL_COUNT } from './file-transfer.js'
import { OUTPUTS_PATH } from './hardened-spec.js'
import { DOWNLOAD_BASE } from './host-files.js'
import { interleave } from './interleave.js'
import { DOCKER_CLI } from './peers/docker-cli.js'
import {
  bareExec,
  createFloorSandbox,
  type FloorSandbox,
  removeFloorSandbox,
} from './peers/dockerode-floor.js'
import type { Comparison, Scenario } from './scenario.js'
import { formatRatio, summarize } from './stats.js'

const NODE_IMAGE = process.env.CORDON_BENCH_NODE_IMAGE ?? 'cordon-test/node:latest'
/** A `--tmpfs` mount, as cordon makes an `ephemeral` directory: in gVisor's own memory. */
const SENTRY_TMPFS = '/scratch'
const PROCESS_LOOP = 50
const NODE_LOOP = 5

/**
 * The program run inside the sandbox for each measurement. It times only the
 * work (set-up and removal are outside its clock) and prints `{ "ms": n }`.
 * The per-file calls are the agent's for a batch into directories it made
 * (as the file rows upload): an exclusive no-follow create of the file,
 * `readlink` of the descriptor (the agent's check of where it landed),
 * `write`, `close`; a read is a no-follow `open`, `readlink` of the
 * descriptor, `read` of the listed size, `close` (the listing before it,
 * an `lstat` a file, is left out).
 * Written into a directory that already holds the files, a write is six
 * calls (`lstat`, a temporary name, and a `rename` over the old file).
 */
const INSIDE = `
const fs = require('fs')
const { spawnSync } = require('child_process')
const c = fs.constants
const [mode, dir, count, size] = process.argv.slice(1)
const now = () => Number(process.hrtime.bigint()) / 1e6
const name = (i) => 'd' + String(i % 20).padStart(2, '0') + '/f' + String(i).padStart(4, '0') + '.txt'
let ms
if (mode === 'big') {
  const chunk = Buffer.alloc(1 << 20, 7)
  const start = now()
  const temp = dir + '/.big.tmp'
  const fd = fs.openSync(temp, c.O_WRONLY | c.O_CREAT | c.O_EXCL | c.O_NOFOLLOW, 0o644)
  for (let written = 0; written < Number(size); written += chunk.length) fs.writeSync(fd, chunk)
  fs.closeSync(fd)
  fs.renameSync(temp, dir + '/big.bin')
  ms = now() - start
  fs.unlinkSync(dir + '/big.bin')
} else if (mode === 'small-write') {
  for (let d = 0; d < 20; d++) fs.mkdirSync(dir + '/d' + String(d).padStart(2, '0'), { recursive: true })
  const body = Buffer.alloc(4096, 7)
  const start = now()
  for (let i = 0; i < Number(count); i++) {
    const fd = fs.openSync(dir + '/' + name(i), c.O_WRONLY | c.O_CREAT | c.O_EXCL | c.O_NOFOLLOW, 0o644)
    fs.readlinkSync('/proc/self/fd/' + fd)
    fs.writeSync(fd, body, 0, 512 + ((i * 7919) % 3585))
    fs.closeSync(fd)
  }
  ms = now() - start
} else if (mode === 'small-read') {
  const into = Buffer.alloc(8192)
  const start = now()
  for (let i = 0; i < Number(count); i++) {
    const fd = fs.openSync(dir + '/' + name(i), c.O_RDONLY | c.O_NOFOLLOW | c.O_NONBLOCK)
    fs.readlinkSync('/proc/self/fd/' + fd)
    fs.readSync(fd, into, 0, 512 + ((i * 7919) % 3585))
    fs.closeSync(fd)
  }
  ms = now() - start
} else if (mode === 'loop') {
  const start = now()
  const done = spawnSync('/bin/sh', ['-c', 'i=0; while [ $i -lt ' + count + ' ]; do ' + dir + '; i=$((i+1)); done'])
  if (done.status !== 0) throw new Error('loop failed: ' + done.stderr)
  ms = (now() - start) / Number(count)
} else throw new Error('unknown mode ' + mode)
console.log(JSON.stringify({ ms }))
`

/** Runs INSIDE in the container as the sandbox user and returns the time it measured. */
async function inside(container: Docker.Container, args: readonly string[]): Promise<number> {
  const exec = await container.exec({
    Cmd: ['node', '-e', INSIDE, ...args],
    AttachStdout: true,
    AttachStderr: true,
  })
  const stream = await exec.start({ hijack: true, stdin: false })
  const out: Buffer[] = []
  const err: Buffer[] = []
  const stdout = new PassThrough().on('data', (chunk: Buffer) => out.push(chunk))
  const stderr = new PassThrough().on('data', (chunk: Buffer) => err.push(chunk))
  docker.modem.demuxStream(stream, stdout, stderr)
  await new Promise<void>((resolve, reject) => {
    stream.on('end', resolve)
    stream.on('close', resolve)
    stream.on('error', reject)
  })
  const { ExitCode } = await exec.inspect()
  const text = Buffer.concat(out).toString()
  if (ExitCode !== 0)
    throw new Error(`inside ${args.join(' ')} exited ${ExitCode}: ${Buffer.concat(err)}`)
  return (JSON.parse(text.trim().split('\n').pop()!) as { ms: number }).ms
}

export const gvisorFloors: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 1 : 2
  const iterations = quick ? 3 : 8
  const work = await mkdtemp(join(tmpdir(), 'cordon-bench-floors-'))
  const downloads = await mkdtemp(join(DOWNLOAD_BASE, 'cordon-bench-floors-'))
  let floor: FloorSandbox | undefined
  try {
    const inputs = await makeInputs(work)
    // The floor's container (hardened, runsc, the tmpfs workspace volume),
    // on the Node image, with a `--tmpfs` mount as cordon makes for an
    // `ephemeral` directory.
    floor = await createFloorSandbox(undefined, {
      runtime: 'runsc',
      image: NODE_IMAGE,
      tmpfs: { [SENTRY_TMPFS]: 'rw,nosuid,nodev,size=512m,mode=1777' },
    })
    const container = floor.container
    const id = container.id
    // Files the read arms read, written once: the agent's read inside the
    // mount cordon uses, `docker cp`'s in the volume (the engine cannot
    // see into a mount that gVisor keeps in its own memory).
    for (const base of [SENTRY_TMPFS, OUTPUTS_PATH])
      await inside(container, ['small-write', `${base}/read`, String(SMALL_COUNT)])

    /** Samples measured inside the sandbox, by arm (the exec around them is not counted). */
    const measured = new Map<string, number>()
    const insideArm = (armName: string, args: () => readonly string[]) => ({
      name: armName,
      run: async () => {
        measured.set(armName, await inside(container, args()))
      },
    })
    let round = 0
    const fresh = (base: string) => `${base}/w${round++}`
    const arms = [
      insideArm('inside: 100 MiB into the `--tmpfs` mount', () => [
        'big',
        SENTRY_TMPFS,
        '0',
        String(BIG_SIZE),
      ]),
      insideArm('inside: 100 MiB into the tmpfs volume', () => [
        'big',
        OUTPUTS_PATH,
        '0',
        String(BIG_SIZE),
      ]),
      {
        name: '`docker cp` 100 MiB up',
        run: () => runQuiet(DOCKER_CLI, ['cp', inputs.big, `${id}:${OUTPUTS_PATH}/big.bin`]),
      },
      insideArm('inside: 2,000 files written, the agent’s calls (`--tmpfs` mount)', () => [
        'small-write',
        fresh(SENTRY_TMPFS),
        String(SMALL_COUNT),
      ]),
      insideArm('inside: 2,000 files read, the agent’s calls (`--tmpfs` mount)', () => [
        'small-read',
        `${SENTRY_TMPFS}/read`,
        String(SMALL_COUNT),
      ]),
      {
        name: '`docker cp` 2,000 files up',
        run: () => runQuiet(DOCKER_CLI, ['cp', inputs.smallDir, `${id}:${fresh(OUTPUTS_PATH)}`]),
      },
      {
        name: '`docker cp` 2,000 files down',
        prepare: async () => {
          const target = join(downloads, `down-${round++}`)
          await mkdir(target)
          return target
        },
        run: (target: string) => runQuiet(DOCKER_CLI, ['cp', `${id}:${OUTPUTS_PATH}/read`, target]),
        cleanup: (target: string) => rm(target, { recursive: true, force: true }),
      },
      insideArm('inside: `/bin/true` from a shell loop, per process', () => [
        'loop',
        '/bin/true',
        String(PROCESS_LOOP),
      ]),
      insideArm('inside: `node -e 0` from a shell loop, per start', () => [
        'loop',
        'node -e 0',
        String(NODE_LOOP),
      ]),
      {
        name: 'bare dockerode exec of `true`',
        run: async () => {
          const code = await bareExec(container, ['true'])
          if (code !== 0) throw new Error(`true exited ${code}`)
        },
      },
    ]
    const insideSamples = new Map<string, number[]>(arms.map((arm) => [arm.name, []]))
    const wall = await interleave(arms, {
      warmup,
      iterations,
      onRun: (arm, runRound, ms, isWarmup) => {
        const own = measured.get(arm)
        measured.delete(arm)
        if (own !== undefined && !isWarmup) insideSamples.get(arm)!.push(own)
        log(
          `  ${arm} #${runRound}${isWarmup ? ' (warm-up)' : ''}: ${(own ?? ms).toFixed(2)} ms${own === undefined ? '' : ' inside'}`,
        )
      },
    })
    /** A sample summary by arm: the time measured inside where there is one, else the wall time. */
    const summaries = new Map(
      arms.map((arm) => {
        const own = insideSamples.get(arm.name)!
        return [arm.name, summarize(own.length > 0 ? own : wall.get(arm.name)!)] as const
      }),
    )
    const median = (arm: { name: string }) => summaries.get(arm.name)!.median
    const [
      tmpfsBig,
      volumeBig,
      cpBig,
      smallWrite,
      smallRead,
      cpUp,
      cpDown,
      trueStart,
      nodeStart,
      bare,
    ] = arms
    const rows: Array<[string, number, string]> = [
      [
        '100 MiB up: `docker cp` / the write alone inside, into a `--tmpfs` mount (the bytes crossing into the sandbox come on top)',
        median(cpBig!) / median(tmpfsBig!),
        '(report: row 4 targets ≥ 1.00x)',
      ],
      [
        '100 MiB up: the same into a tmpfs volume served by the gofer',
        median(cpBig!) / median(volumeBig!),
        '(report)',
      ],
      [
        '2,000 files up: the best cordon could reach (`docker cp` / the agent’s calls alone inside)',
        median(cpUp!) / median(smallWrite!),
        '(report: row 4 targets ≥ 1.00x)',
      ],
      [
        '2,000 files down: the best cordon could reach (`docker cp` / the agent’s calls alone inside)',
        median(cpDown!) / median(smallRead!),
        '(report: row 4 targets ≥ 1.00x)',
      ],
      [
        'exec: one process started inside by a shell (fork, exec, exit) / one bare dockerode exec',
        median(trueStart!) / median(bare!),
        '(report: row 3 targets ≤ 0.10x; cordon starts commands with vfork, which spares the copy)',
      ],
      [
        'create: `node -e 0` inside / one bare dockerode exec (cordon starts Node where the floor execs `true`)',
        median(nodeStart!) / median(bare!),
        '(report: row 1 targets ≤ 1.00x)',
      ],
    ]
    const comparisons: Comparison[] = rows.map(([what, value, target]) => ({
      scenario: '16 floors inside gVisor',
      what,
      ratio: formatRatio(value),
      target,
      met: undefined,
    }))
    return {
      id: 'gvisor-floors',
      title: '16. Floors inside gVisor (issue 30)',
      method: `One bare hardened runsc container (the floor's spec on ${NODE_IMAGE}, with a 512 MiB \`--tmpfs\` mount at ${SENTRY_TMPFS} beside the tmpfs workspace volume at ${OUTPUTS_PATH}). ${warmup} warm-up + ${iterations} measured rounds per arm, round-robin. The "inside" arms are timed by a Node program in the sandbox, around the work alone (the exec that runs it is not counted); the peers are timed from this process: \`docker cp\` (the CLI, as in scenario 4) and one dockerode exec round trip (as in scenario 3). Process starts are a shell loop of ${PROCESS_LOOP} \`/bin/true\` and ${NODE_LOOP} \`node -e 0\`, divided by the count.`,
      tables: [
        {
          caption: 'Floors inside gVisor, and the peers',
          arms: arms.map((arm) => ({
            name: arm.name,
            summary: summaries.get(arm.name)!,
            unit: 'ms',
          })),
        },
      ],
      comparisons,
      notes: [
        "`docker cp` never enters gVisor: the engine writes and reads the volume on the host. Everything cordon moves is written or read by its agent inside the sandbox, so a floor above `docker cp`'s time is a ratio cordon cannot reach on this runtime, whatever its transport.",
        'A tmpfs volume takes large writes far faster than a `--tmpfs` mount under this runsc, but each file opened, created or renamed there is a round trip to the gofer (bench/misses.md has the small-file numbers for it).',
      ],
      sections: [],
    }
  } finally {
    if (floor) await removeFloorSandbox(floor)
    await rm(work, { recursive: true, force: true })
    await rm(downloads, { recursive: true, force: true })
  }
}
