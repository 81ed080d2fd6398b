import { cordonProvider } from '/work/wt-pipe/bench/dist/cordon.js'
const NODE_IMAGE = 'cordon-test/node:latest'
const program = `
const fs = require('fs')
const table = new Map()
let h = 7
for (let i = 0; i < 120000000; i++) { h = (h * 31 + i) % 1000003; if (i % 2000 === 0) table.set('k' + (i / 2000), { h }) }
table.set('k12345', { h })
fs.writeFileSync('/tmp/ready', String(table.size))
setInterval(() => {
  if (!fs.existsSync('/tmp/req')) return
  const key = fs.readFileSync('/tmp/req', 'utf8').trim()
  fs.unlinkSync('/tmp/req')
  fs.writeFileSync('/tmp/ans.new', JSON.stringify(table.get(key)))
  fs.renameSync('/tmp/ans.new', '/tmp/ans')
}, 5)
`
const ASK = ['-c','echo k12345 > /tmp/req.new && mv /tmp/req.new /tmp/req; until [ -f /tmp/ans ]; do sleep 0.01; done; cat /tmp/ans']
let last
const provider = cordonProvider({ runtime: 'runsc', image: NODE_IMAGE, onEvent: (e) => { if (e.type === 'lifecycle' && e.phase === 'create.ready') last = e.steps } })
const src = await provider.create({ memoryLimitMb: 768 })
await src.start('node', ['-e', program])
await src.exec('sh', ASK)
await src.exec('rm', ['-f','/tmp/ans'])
const snap = await src.snapshot({ memory: true })
for (let i = 0; i < 3; i++) {
  let t = performance.now()
  const s = await provider.create({ snapshot: snap.id })
  const c = performance.now() - t
  await s.exec('sh', ASK)
  console.log('memory', Math.round(c), Math.round(performance.now() - t), JSON.stringify(last))
  await s.destroy()
  t = performance.now()
  const k = await provider.create({ memoryLimitMb: 768 })
  const c2 = performance.now() - t
  await k.start('node', ['-e', program]); await k.exec('sh', ASK)
  console.log('cold', Math.round(c2), Math.round(performance.now() - t), JSON.stringify(last))
  await k.destroy()
}
await src.destroy(); await provider.snapshots.remove(snap.id); await provider.close()
