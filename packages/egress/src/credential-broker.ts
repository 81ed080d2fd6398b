/**
 * Credential brokering: the sandbox never holds the secret.
 *
 * A credential is bound to one exact host. Without a placeholder, the proxy
 * sets the header on every request to that host. With one, the sandbox sends
 * the placeholder and the proxy swaps in the real value, in that header, on
 * requests to that host only. A placeholder seen on its way anywhere else (in
 * the URL, any header, or the body) refuses the request: it means something in
 * the sandbox is sending a credential somewhere it was not meant to go.
 *
 * Only plain-HTTP requests are visible to the proxy. Brokering therefore works
 * when the sandbox talks `http://` to a bound host; the proxy then makes the
 * upstream leg HTTPS itself, so the secret never crosses a network in clear.
 */
import { Transform, type TransformCallback } from 'node:stream'
import type { BrokeredCredential } from '@cordon/core'
import { normalizeTargetHost, policySubject } from './authority.js'

interface BoundCredential {
  /** Canonical host (policy subject form). */
  readonly host: string
  /** Lowercase header name. */
  readonly header: string
  readonly value: string
  readonly placeholder: string | undefined
}

/** The reason a credential list is unusable, one entry per problem. */
export interface CredentialIssue {
  readonly path: string
  readonly message: string
}

/** Problems that the zod schema cannot see: host form, duplicates, overlapping placeholders. */
export function checkCredentials(credentials: readonly BrokeredCredential[]): CredentialIssue[] {
  const issues: CredentialIssue[] = []
  const bindings = new Set<string>()
  const placeholders: { readonly text: string; readonly index: number }[] = []
  credentials.forEach((credential, index) => {
    const target = normalizeTargetHost(credential.host)
    if (target === undefined || credential.host.startsWith('.')) {
      issues.push({
        path: `${index}.host`,
        message: 'must be one exact host name (no port, no leading dot)',
      })
      return
    }
    const binding = `${policySubject(target)} ${credential.header.toLowerCase()}`
    if (bindings.has(binding)) {
      issues.push({
        path: `${index}.header`,
        message: 'a second credential for the same host and header',
      })
    }
    bindings.add(binding)
    if (credential.placeholder !== undefined) {
      if (credential.value.includes(credential.placeholder)) {
        issues.push({
          path: `${index}.placeholder`,
          message: 'must not occur inside the real value',
        })
      }
      for (const other of placeholders) {
        if (
          other.text.includes(credential.placeholder) ||
          credential.placeholder.includes(other.text)
        ) {
          issues.push({
            path: `${index}.placeholder`,
            message: `overlaps the placeholder of credential ${other.index}; each must be distinct`,
          })
        }
      }
      placeholders.push({ text: credential.placeholder, index })
    }
  })
  return issues
}

export type HeaderList = [name: string, value: string][]

export class CredentialBroker {
  static readonly empty = new CredentialBroker([])

  readonly #credentials: readonly BoundCredential[]

  /** `credentials` must have passed the schema and {@link checkCredentials}. */
  constructor(credentials: readonly BrokeredCredential[]) {
    this.#credentials = credentials.map((credential) => {
      const target = normalizeTargetHost(credential.host)
      if (target === undefined)
        throw new TypeError(`credential host ${credential.host} is not a host`)
      return {
        host: policySubject(target),
        header: credential.header.toLowerCase(),
        value: credential.value,
        placeholder: credential.placeholder,
      }
    })
  }

  /** A host with any credential bound to it: its upstream leg is always HTTPS. */
  isBound(host: string): boolean {
    return this.#credentials.some((credential) => credential.host === host)
  }

  /**
   * The secret strings bound to `host`, as they could come back in a
   * response: each value, and its token part when the value is `Scheme token`.
   */
  secretsFor(host: string): readonly string[] {
    const secrets = new Set<string>()
    for (const credential of this.#credentials) {
      if (credential.host !== host) continue
      secrets.add(credential.value)
      const token = credential.value.split(' ').at(-1) ?? ''
      if (token.length >= 8) secrets.add(token)
    }
    return [...secrets]
  }

  /** Placeholders that must not travel to `host`. */
  foreignPlaceholders(host: string): readonly string[] {
    return this.#credentials.flatMap((credential) =>
      credential.placeholder !== undefined && credential.host !== host
        ? [credential.placeholder]
        : [],
    )
  }

  /** True if any of `placeholders` occurs in `text`, raw or percent-decoded. */
  static carriesPlaceholder(text: string, placeholders: readonly string[]): boolean {
    if (placeholders.length === 0) return false
    const decoded = decodePercentLeniently(text)
    return placeholders.some(
      (placeholder) => text.includes(placeholder) || decoded.includes(placeholder),
    )
  }

  /**
   * The headers to send upstream to `host`: placeholders swapped for real
   * values in their bound header, and unconditional credentials set (replacing
   * whatever the sandbox sent under that name).
   */
  applyTo(host: string, headers: HeaderList): HeaderList {
    const bound = this.#credentials.filter((credential) => credential.host === host)
    if (bound.length === 0) return headers
    const unconditional = new Set(
      bound
        .filter((credential) => credential.placeholder === undefined)
        .map((credential) => credential.header),
    )
    const result: HeaderList = []
    for (const [name, value] of headers) {
      const lower = name.toLowerCase()
      if (unconditional.has(lower)) continue
      let rewritten = value
      for (const credential of bound) {
        if (credential.header === lower && credential.placeholder !== undefined) {
          rewritten = rewritten.split(credential.placeholder).join(credential.value)
        }
      }
      result.push([name, rewritten])
    }
    for (const credential of bound) {
      if (credential.placeholder === undefined) result.push([credential.header, credential.value])
    }
    return result
  }
}

/** A run of well-formed `%XX` escapes: the bytes of one or more characters. */
const ESCAPE_RUN = /(?:%[0-9a-f]{2})+/gi

/**
 * Decodes every well-formed `%XX` escape and keeps the rest of the text as it
 * is. `decodeURIComponent` gives up on the whole text at the first malformed
 * escape, which would let one `%ZZ` hide an escaped placeholder beside it; an
 * upstream that decodes leniently would still see the placeholder. Each run
 * of escapes is decoded as UTF-8 (a multi-byte character's escapes are always
 * one run), bytes that are not UTF-8 becoming U+FFFD. One level only: a
 * fixpoint would cost time quadratic in the length of `%2525…`, on a gateway
 * shared by every sandbox.
 */
function decodePercentLeniently(text: string): string {
  if (!text.includes('%')) return text
  return text.replace(ESCAPE_RUN, (run) =>
    Buffer.from(run.replaceAll('%', ''), 'hex').toString('utf8'),
  )
}

/** Raised inside a request body stream when a foreign placeholder goes past. */
export class PlaceholderMisdirectedError extends Error {
  constructor() {
    super('a brokered-credential placeholder was sent to a host it is not bound to')
    this.name = 'PlaceholderMisdirectedError'
  }
}

/**
 * Passes a body through while watching for placeholders. It holds back the
 * last (longest placeholder - 1) bytes of what it has seen, so a placeholder
 * split across chunks is caught before any part of it has been forwarded.
 */
export function placeholderScanner(placeholders: readonly string[]): Transform {
  const needles = placeholders.map((placeholder) => Buffer.from(placeholder, 'utf8'))
  const keep = Math.max(0, ...needles.map((needle) => needle.length - 1))
  let carry = Buffer.alloc(0)
  return new Transform({
    transform(chunk: Buffer, _encoding, callback: TransformCallback) {
      const window = carry.length === 0 ? chunk : Buffer.concat([carry, chunk])
      if (needles.some((needle) => window.includes(needle))) {
        callback(new PlaceholderMisdirectedError())
        return
      }
      const release = Math.max(0, window.length - keep)
      carry = Buffer.from(window.subarray(release))
      callback(null, release > 0 ? window.subarray(0, release) : undefined)
    },
    flush(callback: TransformCallback) {
      callback(null, carry.length > 0 ? carry : undefined)
    },
  })
}

/** Replaces each secret with a mask of the same length, so message framing stays valid. */
export function maskSecrets(text: string, secrets: readonly string[]): string {
  let result = text
  for (const secret of longestFirst(secrets)) result = result.split(secret).join(mask(secret))
  return result
}

function mask(secret: string): string {
  return '*'.repeat(Buffer.byteLength(secret))
}

function longestFirst(secrets: readonly string[]): string[] {
  return [...secrets].sort((a, b) => b.length - a.length)
}

/**
 * Masks secrets in a response body on its way back to the sandbox, for
 * upstreams that echo what they were sent (error messages quoting the key,
 * debugging endpoints). Same-length masks keep `Content-Length` true; like
 * the placeholder scanner it holds back enough bytes to catch a secret split
 * across chunks.
 */
export function secretRedactor(secrets: readonly string[]): Transform {
  const needles = longestFirst(secrets).map((secret) => Buffer.from(secret, 'utf8'))
  const keep = Math.max(0, ...needles.map((needle) => needle.length - 1))
  let carry = Buffer.alloc(0)
  return new Transform({
    transform(chunk: Buffer, _encoding, callback: TransformCallback) {
      const window = Buffer.concat([carry, chunk])
      for (const needle of needles) {
        for (
          let at = window.indexOf(needle);
          at !== -1;
          at = window.indexOf(needle, at + needle.length)
        ) {
          window.fill(0x2a, at, at + needle.length)
        }
      }
      const release = Math.max(0, window.length - keep)
      carry = Buffer.from(window.subarray(release))
      callback(null, release > 0 ? window.subarray(0, release) : undefined)
    },
    flush(callback: TransformCallback) {
      callback(null, carry.length > 0 ? carry : undefined)
    },
  })
}
