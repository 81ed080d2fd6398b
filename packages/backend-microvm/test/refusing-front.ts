import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * An HTTP front for the stand-in's control plane that refuses (409) the
 * first `refusals` requests `refuses` picks (a sweep's own call), and passes
 * everything else through.
 */
export async function refusingFront(
  target: string,
  refusals: number,
  refuses: (method: string, url: URL) => boolean,
): Promise<{ endpoint: string; refused: () => number; close: () => Promise<void> }> {
  let refused = 0
  const server: Server = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', target)
    if (refused < refusals && refuses(req.method ?? 'GET', url)) {
      refused++
      res.writeHead(409, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { code: 'conflict', message: 'refused for the test' } }))
      return
    }
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const answer = await fetch(url, {
      method: req.method ?? 'GET',
      headers: {
        ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
        ...(chunks.length > 0 ? { 'content-type': 'application/json' } : {}),
      },
      ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
    })
    res.writeHead(answer.status, {
      'content-type': answer.headers.get('content-type') ?? 'application/json',
    })
    res.end(Buffer.from(await answer.arrayBuffer()))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    refused: () => refused,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}
