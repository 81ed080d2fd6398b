import { randomUUID } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'

const MAX_BODY_BYTES = 256 * 1024

/** An ARM error answer: `{ error: { code, message, details? } }` with a status. */
export class ArmHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
    readonly details: ReadonlyArray<{ code: string; message: string }> = [],
  ) {
    super(message)
    this.name = 'ArmHttpError'
  }
}

/** Sends a JSON answer with the request-id headers every ARM response carries. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {},
): void {
  const text = body === undefined ? '' : JSON.stringify(body)
  res.writeHead(status, {
    'x-ms-request-id': randomUUID(),
    'x-ms-correlation-request-id': randomUUID(),
    ...(text ? { 'content-type': 'application/json; charset=utf-8' } : {}),
    'content-length': String(Buffer.byteLength(text)),
    ...headers,
  })
  res.end(text)
}

export function sendError(res: ServerResponse, error: ArmHttpError): void {
  sendJson(
    res,
    error.status,
    {
      error: {
        code: error.code,
        message: error.message,
        ...(error.details.length > 0 ? { details: error.details } : {}),
      },
    },
    error.headers,
  )
}

export async function readJsonBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.byteLength
    if (size > MAX_BODY_BYTES)
      throw new ArmHttpError(413, 'RequestEntityTooLarge', 'the request body is too large')
    chunks.push(chunk)
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'))
  } catch {
    throw new ArmHttpError(400, 'InvalidRequestContent', 'the request content is not valid JSON')
  }
}
