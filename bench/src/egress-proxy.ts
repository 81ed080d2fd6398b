/**
 * Scenario 5: the egress proxy on loopback. CONNECT tunnel throughput and the
 * time to the first byte, against a direct connection, proxy-chain (npm) and
 * tinyproxy (Debian). Each proxy and the upstream run in processes of their
 * own; the client is this process.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer, connect as netConnect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { UPSTREAM_HOST } from './egress/upstream-name.js'
import { run } from './engine.js'
import { interleave } from './interleave.js'
import type { ArmResult, Comparison, Scenario } from './scenario.js'
import { formatMs, formatRatio, summarize } from './stats.js'

const MiB = 1024 * 1024
const THROUGHPUT_BYTES = 256 * MiB

interface Endpoint {
  readonly name: string
  /** Undefined for the direct connection. */
  readonly proxyPort: number | undefined
  readonly proxyPid: number | undefined
  /** What the CONNECT names. */
  readonly target: string
}

/** Starts a bench helper process and waits for its `{"port":N}` line. */
async function startHelper(
  script: string,
  args: readonly string[],
): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(
    process.execPath,
    [fileURLToPath(new URL(script, import.meta.url)), ...args],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  return { child, port: await readPort(child) }
}

async function readPort(child: ChildProcess): Promise<number> {
  let buffered = ''
  return new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`helper exited with ${code} before listening`)))
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString()
      const newline = buffered.indexOf('\n')
      if (newline !== -1) resolve((JSON.parse(buffered.slice(0, newline)) as { port: number }).port)
    })
  })
}

async function freePort(): Promise<number> {
  const server = createServer()
  server.listen({ host: '127.0.0.1', port: 0 })
  await once(server, 'listening')
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0
  await new Promise((resolve) => server.close(resolve))
  return port
}

async function onPath(command: string): Promise<boolean> {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    try {
      await access(join(dir, command))
      return true
    } catch {
      // Keep looking.
    }
  }
  return false
}

/**
 * tinyproxy from Debian: installed here if missing (root only; the package
 * lists on disk are tried first, `apt-get update` only if that fails), then
 * started in the foreground on loopback with a generated config that allows
 * CONNECT to every port.
 */
async function startTinyproxy(
  dir: string,
  log: (line: string) => void,
): Promise<{ child: ChildProcess; port: number } | string> {
  if (!(await onPath('tinyproxy'))) {
    if (process.getuid?.() !== 0) return 'tinyproxy is not installed and installing it needs root'
    log('  installing tinyproxy with apt-get')
    const install = ['install', '-y', '--no-install-recommends', 'tinyproxy']
    process.env.DEBIAN_FRONTEND = 'noninteractive'
    try {
      await run('apt-get', install)
    } catch {
      await run('apt-get', ['update']).catch(() => '')
      try {
        await run('apt-get', install)
      } catch (error) {
        return `apt-get install tinyproxy failed: ${(error as Error).message.split('\n')[0]}`
      }
    }
  }
  const port = await freePort()
  const config = join(dir, 'tinyproxy.conf')
  const asRoot = process.getuid?.() === 0
  await writeFile(
    config,
    [
      ...(asRoot ? ['User nobody', 'Group nogroup'] : []),
      `Port ${port}`,
      'Listen 127.0.0.1',
      'Timeout 600',
      'MaxClients 1024',
      'Allow 127.0.0.1',
      'LogLevel Critical',
      `LogFile "${join(dir, 'tinyproxy.log')}"`,
      'DisableViaHeader Yes',
      '',
    ].join('\n'),
  )
  if (asRoot) await run('chmod', ['0777', dir])
  const child = spawn('tinyproxy', ['-d', '-c', config], { stdio: ['ignore', 'ignore', 'inherit'] })
  // tinyproxy prints nothing when ready; poll until the port accepts.
  for (let attempt = 0; attempt < 100; attempt++) {
    try {
      const socket = await connectTo(port)
      socket.destroy()
      return { child, port }
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  child.kill()
  return 'tinyproxy did not start listening within 2 s'
}

/** CPU time (user + system) a process has used so far, in ms; from /proc, clock ticks of 10 ms. */
async function cpuMs(pid: number | undefined): Promise<number> {
  if (pid === undefined) return 0
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return Number.NaN
  }
}

function selfCpuMs(): number {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1000
}

function connectTo(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host: '127.0.0.1', port })
    socket.setNoDelay(true)
    socket.once('error', reject)
    socket.once('connect', () => {
      socket.off('error', reject)
      resolve(socket)
    })
  })
}

/** Opens a connection to the upstream, through `endpoint`'s proxy with CONNECT if it has one. */
async function open(endpoint: Endpoint, upstreamPort: number): Promise<Socket> {
  if (endpoint.proxyPort === undefined) return connectTo(upstreamPort)
  const socket = await connectTo(endpoint.proxyPort)
  socket.write(`CONNECT ${endpoint.target} HTTP/1.1\r\nHost: ${endpoint.target}\r\n\r\n`)
  let head = Buffer.alloc(0)
  for (;;) {
    const [chunk] = (await once(socket, 'data')) as [Buffer]
    head = Buffer.concat([head, chunk])
    const end = head.indexOf('\r\n\r\n')
    if (end === -1) continue
    const status = head.subarray(0, head.indexOf('\r\n')).toString()
    if (!/^HTTP\/1\.[01] 200/.test(status)) {
      socket.destroy()
      throw new Error(`${endpoint.name}: CONNECT answered "${status}"`)
    }
    const rest = head.subarray(end + 4)
    if (rest.length > 0) socket.unshift(rest)
    return socket
  }
}

/** Connect (and tunnel) to the upstream, ask for one byte, and stop the clock when it arrives. */
async function timeToFirstByte(endpoint: Endpoint, upstreamPort: number): Promise<void> {
  const socket = await open(endpoint, upstreamPort)
  socket.write('1\n')
  await once(socket, 'data')
  socket.destroy()
}

/** Receives `bytes` through the connection; resolves when the upstream has closed it. */
async function receive(endpoint: Endpoint, upstreamPort: number, bytes: number): Promise<void> {
  const socket = await open(endpoint, upstreamPort)
  let received = 0
  socket.on('data', (chunk: Buffer) => {
    received += chunk.length
  })
  socket.write(`${bytes}\n`)
  await once(socket, 'end')
  socket.destroy()
  if (received !== bytes)
    throw new Error(`${endpoint.name}: received ${received} of ${bytes} bytes`)
}

export const egressProxy: Scenario = async ({ quick, log }) => {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-bench-egress-'))
  const children: ChildProcess[] = []
  const notes: string[] = []
  try {
    const upstream = await startHelper('./egress/upstream-server.js', [])
    children.push(upstream.child)
    const cordon = await startHelper('./egress/proxy-host.js', ['cordon', String(upstream.port)])
    children.push(cordon.child)
    const proxyChain = await startHelper('./egress/proxy-host.js', [
      'proxy-chain',
      String(upstream.port),
    ])
    children.push(proxyChain.child)
    const tinyproxy = await startTinyproxy(dir, log)
    if (typeof tinyproxy !== 'string') children.push(tinyproxy.child)
    else notes.push(`tinyproxy was not measured: ${tinyproxy}.`)

    const literal = `127.0.0.1:${upstream.port}`
    const endpoints: Endpoint[] = [
      {
        name: 'cordon',
        proxyPort: cordon.port,
        proxyPid: cordon.child.pid,
        target: `${UPSTREAM_HOST}:${upstream.port}`,
      },
      { name: 'direct', proxyPort: undefined, proxyPid: undefined, target: literal },
      {
        name: 'proxy-chain',
        proxyPort: proxyChain.port,
        proxyPid: proxyChain.child.pid,
        target: literal,
      },
      ...(typeof tinyproxy === 'string'
        ? []
        : [
            {
              name: 'tinyproxy',
              proxyPort: tinyproxy.port,
              proxyPid: tinyproxy.child.pid,
              target: literal,
            },
          ]),
    ]
    const onRun = (arm: string, round: number, ms: number, isWarmup: boolean) =>
      log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(3)} ms`)

    const ttfbRounds = quick ? { warmup: 20, iterations: 100 } : { warmup: 50, iterations: 400 }
    const ttfb = await interleave(
      endpoints.map((endpoint) => ({
        name: endpoint.name,
        run: () => timeToFirstByte(endpoint, upstream.port),
      })),
      ttfbRounds,
    )
    const throughputRounds = quick ? { warmup: 1, iterations: 3 } : { warmup: 2, iterations: 8 }
    // CPU time each process spends per MiB moved: with two cores, a third
    // busy process (any proxy) competes with the client and the upstream.
    const cpu = new Map(
      endpoints.map((endpoint) => [endpoint.name, { client: 0, upstream: 0, proxy: 0, runs: 0 }]),
    )
    const throughput = await interleave(
      endpoints.map((endpoint) => ({
        name: endpoint.name,
        run: async () => {
          const before = [
            selfCpuMs(),
            await cpuMs(upstream.child.pid),
            await cpuMs(endpoint.proxyPid),
          ]
          await receive(endpoint, upstream.port, THROUGHPUT_BYTES)
          const after = [
            selfCpuMs(),
            await cpuMs(upstream.child.pid),
            await cpuMs(endpoint.proxyPid),
          ]
          const total = cpu.get(endpoint.name)!
          total.client += after[0]! - before[0]!
          total.upstream += after[1]! - before[1]!
          total.proxy += after[2]! - before[2]!
          total.runs += 1
        },
      })),
      { ...throughputRounds, onRun },
    )

    const names = endpoints.map((endpoint) => endpoint.name)
    const ttfbSummary = new Map(names.map((name) => [name, summarize(ttfb.get(name)!)]))
    const tputSummary = new Map(names.map((name) => [name, summarize(throughput.get(name)!)]))
    const mibps = (name: string) => THROUGHPUT_BYTES / MiB / (tputSummary.get(name)!.median / 1000)
    const direct = ttfbSummary.get('direct')!
    const added = (name: string) => ttfbSummary.get(name)!.median - direct.median
    const peers = names.filter((name) => name !== 'cordon' && name !== 'direct')
    const bestPeer = peers.reduce((a, b) => (mibps(a) >= mibps(b) ? a : b))
    const cpuPer100MiB = (name: string) => {
      const total = cpu.get(name)!
      const per = (ms: number) => ((ms / total.runs / (THROUGHPUT_BYTES / MiB)) * 100).toFixed(0)
      return `${per(total.client)} / ${per(total.upstream)} / ${name === 'direct' ? '-' : per(total.proxy)}`
    }
    const ttfbArms: ArmResult[] = names.map((name) => ({
      name,
      summary: ttfbSummary.get(name)!,
      unit: 'ms',
      extra: { 'added median vs direct': name === 'direct' ? '' : formatMs(added(name)) },
    }))
    const tputArms: ArmResult[] = names.map((name) => ({
      name,
      summary: tputSummary.get(name)!,
      unit: 'ms',
      extra: {
        'MiB/s at median': mibps(name).toFixed(0),
        'vs direct': formatRatio(mibps(name) / mibps('direct')),
        'CPU ms per 100 MiB: client / upstream / proxy': cpuPer100MiB(name),
      },
    }))
    const comparisons: Comparison[] = [
      {
        scenario: '5 egress proxy',
        what: 'cordon tunnel throughput / direct',
        ratio: formatRatio(mibps('cordon') / mibps('direct')),
        target: '≥ 0.90x',
        met: mibps('cordon') / mibps('direct') >= 0.9,
      },
      {
        scenario: '5 egress proxy',
        what: `cordon tunnel throughput / best peer (${bestPeer})`,
        ratio: formatRatio(mibps('cordon') / mibps(bestPeer)),
        target: '≥ 1.00x',
        met: mibps('cordon') >= mibps(bestPeer),
      },
      {
        scenario: '5 egress proxy',
        what: 'cordon added median time to first byte',
        ratio: formatMs(added('cordon')),
        target: '< 1 ms',
        met: added('cordon') < 1,
      },
      ...peers.map((name) => ({
        scenario: '5 egress proxy',
        what: `${name} added median time to first byte`,
        ratio: formatMs(added(name)),
        target: '(report)',
        met: undefined,
      })),
    ]
    return {
      id: 'egress-proxy',
      title: '5. Egress proxy on loopback: CONNECT tunnel',
      method: `Upstream: a TCP server in its own Node process on 127.0.0.1 that sends as many bytes as the client's first line asks for. Each Node proxy runs in its own process; tinyproxy is Debian's, run in the foreground with a generated config. Time to first byte: connect (to the proxy, CONNECT, wait for 200) and ask for 1 byte, until it arrives; ${ttfbRounds.warmup} warm-up + ${ttfbRounds.iterations} measured rounds per arm, round-robin. Throughput: ${THROUGHPUT_BYTES / MiB} MiB down one tunnel, from the request until the upstream's close arrives; ${throughputRounds.warmup} warm-up + ${throughputRounds.iterations} measured rounds. cordon's proxy is configured as a host would for an internal destination: \`policy: static [${UPSTREAM_HOST}]\`, \`allowInwardFor: [${UPSTREAM_HOST}]\`, \`allowedPorts: [upstream port]\`, and a \`lookup\` that maps the name to 127.0.0.1 (it screens loopback otherwise); proxy-chain and tinyproxy are given the IP literal, so they do no name resolution at all.`,
      tables: [
        { caption: 'Time to first byte (connect + CONNECT + 1 byte)', arms: ttfbArms },
        { caption: `${THROUGHPUT_BYTES / MiB} MiB through one tunnel`, arms: tputArms },
      ],
      comparisons,
      notes,
      sections: [],
    }
  } finally {
    for (const child of children) child.kill('SIGTERM')
    await rm(dir, { recursive: true, force: true })
  }
}
