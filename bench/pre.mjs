import { createRequire } from 'node:module'
const require = createRequire(import.meta.resolve('@cordon/backend-docker'))
const Modem = createRequire(require.resolve('dockerode'))('docker-modem')
const orig = Modem.prototype.dial
let T0 = 0; let marks = []
Modem.prototype.dial = function (opts, cb) {
  const t = performance.now() - T0
  return orig.call(this, opts, (err, data) => { marks.push([opts.method + ' ' + opts.path.replace(/[0-9a-f]{64}/, '<id>').replace(/\?.*/, ''), t, performance.now() - T0]); cb(err, data) })
}
const { cordonProvider } = await import('/work/main/bench/dist/cordon.js')
const p = cordonProvider()
const N = Number(process.argv[2] ?? 16)
const rows = {}
for (let i = 0; i < N + 3; i++) {
  marks = []; T0 = performance.now(); const s = await p.create(); await s.exec('true'); const te = performance.now() - T0
  if (i >= 3) { for (const [k, a, b] of marks) (rows[k] ??= []).push([a, b - a]); (rows.total ??= []).push([0, te]) }
  await s.destroy()
}
const med = (a) => { const x = [...a].sort((p, q) => p - q); return x[x.length >> 1].toFixed(1) }
for (const [k, v] of Object.entries(rows)) console.log(k.padEnd(40), 'at', med(v.map((r) => r[0])), 'took', med(v.map((r) => r[1])), 'n', v.length)
await p.close()
