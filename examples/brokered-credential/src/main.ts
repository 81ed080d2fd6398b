/**
 * Egress with a brokered credential. The sandbox may reach one API, and only
 * through cordon's egress gateway; the gateway adds the API key to every
 * request to that host and sends it over HTTPS. The key is given to the
 * provider, never to the sandbox: code in the sandbox can use the API but
 * cannot read, print or exfiltrate the key.
 *
 * So that it runs anywhere without network or accounts, the "API" is a small
 * HTTPS server on this machine with a certificate made here, reached by the
 * gateway under the name `api.example.internal` (`gatewayHosts`), which the
 * provider exempts from private-address screening (`allowInwardFor`).
 * Against a real API only `brokeredCredentials` and the policy are needed.
 *
 * Run: `node dist/main.js`. Prints one JSON line per step.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createSandboxProvider } from '@cordon/sandbox'

const API_HOST = 'api.example.internal'
const API_KEY = `Bearer example-key-${Date.now()}`
/** Where the API server listens, as a container on the default bridge reaches this host. */
const HOST_FROM_CONTAINERS = '172.17.0.1'

function selfSignedCertificate(dir: string): { key: string; cert: string } {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      `/CN=${API_HOST}`,
      '-addext',
      `subjectAltName=DNS:${API_HOST}`,
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ],
    { stdio: 'ignore' },
  )
  return {
    key: readFileSync(join(dir, 'key.pem'), 'utf8'),
    cert: readFileSync(join(dir, 'cert.pem'), 'utf8'),
  }
}

const say = (step: string, detail: Record<string, unknown>) =>
  process.stdout.write(`${JSON.stringify({ step, ...detail })}\n`)

const dir = mkdtempSync(join(tmpdir(), 'cordon-example-'))
const tls = selfSignedCertificate(dir)
// The API answers only requests that carry the key.
const api = createServer(tls, (request, response) => {
  const authorized = request.headers.authorization === API_KEY
  response.writeHead(authorized ? 200 : 401, { 'content-type': 'application/json' })
  response.end(JSON.stringify({ authorized, path: request.url }))
})
await new Promise<void>((resolve) => api.listen(0, '0.0.0.0', resolve))
const apiPort = (api.address() as AddressInfo).port

const provider = createSandboxProvider({
  backend: {
    tier: 'container',
    image: process.env.CORDON_IMAGE ?? 'cordon-test/busybox:latest',
    gatewayHosts: { [API_HOST]: HOST_FROM_CONTAINERS },
    gatewayAllowedPorts: [apiPort],
    gatewayUpstreamCa: tls.cert,
  },
  layout: { outputs: { source: { type: 'ephemeral' } } },
  defaultEgress: { kind: 'static', allowedHosts: [API_HOST] },
  allowInwardFor: [API_HOST],
  brokeredCredentials: [{ host: API_HOST, header: 'authorization', value: API_KEY }],
})

try {
  await using sandbox = await provider.create()
  // The sandbox speaks plain HTTP to its proxy; the gateway upgrades the
  // request to HTTPS and adds the key.
  const call = await sandbox.exec('wget', [
    '-q',
    '-O',
    '-',
    `http://${API_HOST}:${apiPort}/v1/items`,
  ])
  say('api call from the sandbox', { exitCode: call.exitCode, body: JSON.parse(call.stdout) })
  const env = await sandbox.exec('env')
  say('the key in the sandbox environment', { found: env.stdout.includes(API_KEY.split(' ')[1]!) })
  const elsewhere = await sandbox.exec('wget', ['-q', '-O', '-', 'http://example.com/'])
  say('any other host', { exitCode: elsewhere.exitCode, refused: elsewhere.stderr.includes('403') })
} finally {
  await provider.close()
  api.close()
  rmSync(dir, { recursive: true, force: true })
}
