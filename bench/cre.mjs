import { createRequire } from 'node:module'
const require = createRequire(import.meta.resolve('@cordon/backend-docker'))
const Modem = createRequire(require.resolve('dockerode'))('docker-modem')
const orig = Modem.prototype.dial
let captured
Modem.prototype.dial = function (opts, cb) { if (opts.path.startsWith('/containers/create')) captured ??= structuredClone(opts.options); return orig.call(this, opts, cb) }
const { cordonProvider } = await import('/work/main/bench/dist/cordon.js')
const { docker, uniqueName, removeContainer, removeVolume, BENCH_LABELS } = await import('/work/main/bench/dist/engine.js')
const { hardenedCreateOptions, existingVolumeMount, WORKSPACE_VOLUME_OPTIONS } = await import('/work/main/bench/dist/hardened-spec.js')
const p = cordonProvider(); const s = await p.create(); await s.destroy(); await p.close()
delete captured.abortSignal
console.log(JSON.stringify(captured, null, 1))
const base = captured
const strip = (f) => { const o = structuredClone(base); f(o); return o }
const variants = {
  cordon: () => strip(() => {}),
  noRuntime: () => strip((o) => { o.HostConfig.Mounts = o.HostConfig.Mounts.filter((m) => m.Target !== '/.cordon') }),
  noMounts: () => strip((o) => { o.HostConfig.Mounts = [] }),
  noTmpfs: () => strip((o) => { o.HostConfig.Tmpfs = {} }),
  noBinds: () => strip((o) => { o.HostConfig.Binds = [] }),
  floor: () => { const name = uniqueName('f'); return hardenedCreateOptions(name, []) },
}
const R = Object.fromEntries(Object.keys(variants).map((k) => [k, []]))
for (let i = 0; i < 14; i++) for (const [k, f] of Object.entries(variants)) {
  const o = f(); o.name = uniqueName('cv')
  const t = performance.now(); const c = await docker.createContainer(o); const d = performance.now() - t
  if (i >= 2) R[k].push(d)
  await removeContainer(c.id)
}
const med = (a) => { const x = [...a].sort((p, q) => p - q); return x[x.length >> 1].toFixed(1) }
for (const k of Object.keys(R)) console.log(k.padEnd(10), med(R[k]))
