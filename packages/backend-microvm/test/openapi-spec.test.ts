import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'

/**
 * openapi.yaml is the contract an orchestrator implements: it must parse,
 * every reference must resolve, every path parameter must be declared, and it
 * must offer every operation this package's client calls, with the answers
 * the client reads.
 */
const spec = parse(
  readFileSync(fileURLToPath(new URL('../openapi.yaml', import.meta.url)), 'utf8'),
) as {
  openapi: string
  paths: Record<string, Record<string, unknown>>
  components: { schemas: Record<string, Record<string, unknown>> }
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const
type Operation = {
  operationId?: string
  responses?: Record<string, unknown>
  parameters?: Array<{ name: string; in: string }>
  requestBody?: unknown
}

function operations(): Array<{ path: string; method: string; operation: Operation }> {
  return Object.entries(spec.paths).flatMap(([path, item]) =>
    METHODS.filter((method) => item[method] !== undefined).map((method) => ({
      path,
      method,
      operation: item[method] as Operation,
    })),
  )
}

function resolve(ref: string): unknown {
  expect(ref.startsWith('#/'), ref).toBe(true)
  return ref
    .slice(2)
    .split('/')
    .reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], spec)
}

function collectRefs(node: unknown, found: string[] = []): string[] {
  if (Array.isArray(node)) for (const item of node) collectRefs(item, found)
  else if (typeof node === 'object' && node !== null) {
    for (const [key, value] of Object.entries(node)) {
      if (key === '$ref' && typeof value === 'string') found.push(value)
      else collectRefs(value, found)
    }
  }
  return found
}

describe('openapi.yaml', () => {
  it('is OpenAPI 3.1 whose every $ref resolves', () => {
    expect(spec.openapi).toBe('3.1.0')
    const refs = collectRefs(spec)
    expect(refs.length).toBeGreaterThan(10)
    for (const ref of refs) expect(resolve(ref), ref).toBeDefined()
  })

  it('gives each operation a unique id, answers (with 401 for a refused token), and declares each path parameter', () => {
    const ids = operations().map(({ operation }) => operation.operationId)
    expect(ids.every((id) => typeof id === 'string')).toBe(true)
    expect(new Set(ids).size).toBe(ids.length)
    for (const { path, method, operation } of operations()) {
      const label = `${method.toUpperCase()} ${path}`
      expect(Object.keys(operation.responses ?? {}).length, label).toBeGreaterThan(0)
      expect(operation.responses?.['401'], label).toBeDefined()
      const declared = [
        ...((spec.paths[path]!.parameters as Operation['parameters']) ?? []),
        ...(operation.parameters ?? []),
      ]
        .filter((parameter) => parameter.in === 'path')
        .map((parameter) => parameter.name)
      const inTemplate = [...path.matchAll(/\{([^}]+)\}/g)].map((match) => match[1])
      expect(declared.sort(), label).toEqual(inTemplate.sort())
    }
  })

  it('offers every operation the client calls, with the answers it reads', () => {
    const byId = new Map(operations().map((entry) => [entry.operation.operationId, entry]))
    const expected: Array<[string, string, string, string]> = [
      ['createSandbox', 'post', '/v1/sandboxes', '201'],
      ['getSandbox', 'get', '/v1/sandboxes/{sandboxId}', '200'],
      ['deleteSandbox', 'delete', '/v1/sandboxes/{sandboxId}', '204'],
      ['pauseSandbox', 'post', '/v1/sandboxes/{sandboxId}/pause', '200'],
      ['resumeSandbox', 'post', '/v1/sandboxes/{sandboxId}/resume', '200'],
      ['snapshotSandbox', 'post', '/v1/sandboxes/{sandboxId}/snapshots', '201'],
      ['listSandboxes', 'get', '/v1/sandboxes', '200'],
      ['listSnapshots', 'get', '/v1/snapshots', '200'],
      ['deleteSnapshot', 'delete', '/v1/snapshots/{orgId}/{agentId}/{version}', '204'],
    ]
    for (const [id, method, path, success] of expected) {
      const entry = byId.get(id)
      expect(entry, id).toBeDefined()
      expect([entry!.method, entry!.path], id).toEqual([method, path])
      expect(entry!.operation.responses?.[success], id).toBeDefined()
    }
    // The answers the client turns into typed errors.
    for (const id of ['pauseSandbox', 'resumeSandbox', 'snapshotSandbox']) {
      const responses = byId.get(id)!.operation.responses!
      for (const status of ['400', '404', '409', '422'])
        expect(responses[status], `${id} ${status}`).toBeDefined()
    }
    expect(byId.get('createSandbox')!.operation.responses!['404']).toBeDefined()
  })

  it("names a snapshot with the very reference a create's agentSnapshot resumes", () => {
    const { schemas } = spec.components
    const createSnapshot = schemas.CreateSnapshotRequest!.properties as Record<
      string,
      { $ref?: string }
    >
    const snapshot = schemas.Snapshot!.properties as Record<string, { $ref?: string }>
    const create = schemas.CreateSandboxRequest!.properties as Record<string, { $ref?: string }>
    const reference = '#/components/schemas/AgentSnapshotRef'
    expect(createSnapshot.agentSnapshot?.$ref).toBe(reference)
    expect(snapshot.agentSnapshot?.$ref).toBe(reference)
    expect(create.agentSnapshot?.$ref).toBe(reference)
    expect(schemas.AgentSnapshotRef!.required).toEqual(['orgId', 'agentId', 'version'])
    expect(schemas.Snapshot!.required).toEqual(
      expect.arrayContaining(['agentSnapshot', 'memory', 'sizeBytes', 'createdAt', 'labels']),
    )
    // The guest's states include the paused one.
    const description = schemas.SandboxDescription!.properties as Record<
      string,
      { enum?: string[]; $ref?: string }
    >
    expect(description.state!.enum).toContain('paused')
  })

  it('describes a guest (one, and a list by label) with what a second client needs to reach its agent again', () => {
    const answer = (path: string) =>
      (
        spec.paths[path]!.get as {
          responses: Record<string, { content: Record<string, { schema: unknown }> }>
        }
      ).responses['200']!.content['application/json']!.schema
    const reference = '#/components/schemas/SandboxDescription'
    expect(answer('/v1/sandboxes/{sandboxId}')).toEqual({ $ref: reference })
    const list = answer('/v1/sandboxes') as {
      properties: { sandboxes: { items: { $ref: string } } }
    }
    expect(list.properties.sandboxes.items.$ref).toBe(reference)
    const description = spec.components.schemas.SandboxDescription!.properties as Record<
      string,
      { $ref?: string }
    >
    expect(description.agent?.$ref).toBe('#/components/schemas/AgentEndpoint')
    expect(Object.keys(description)).toEqual(
      expect.arrayContaining(['sandboxId', 'state', 'labels', 'rootDir', 'createdAt']),
    )
    // It never returns the agent secret.
    expect(Object.keys(description)).not.toContain('agentSecret')
  })
})
