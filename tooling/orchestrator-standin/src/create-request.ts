import { LABEL_KEY, refProblems, SANDBOX_ID_PATTERN } from './snapshot-request.js'

/** The create request as the stand-in accepts it (see packages/backend-microvm/openapi.yaml). */
export interface ValidCreateRequest {
  readonly sandboxId: string
  readonly template: string | undefined
  readonly agentSnapshot:
    | { readonly orgId: string; readonly agentId: string; readonly version: string }
    | undefined
  readonly memoryLimitMb: number
  readonly maxProcesses: number
  readonly timeoutMs: number | undefined
  readonly egressAllowlist: readonly string[] | undefined
  readonly agentVsockPort: number
  readonly agentSecret: string
  readonly labels: Readonly<Record<string, string>>
}

/** Validates a create body; returns every problem found, or the request. */
export function parseCreateRequest(body: unknown): {
  problems: string[]
  request?: ValidCreateRequest
} {
  const problems: string[] = []
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return { problems: ['the body must be a JSON object'] }
  const raw = body as Record<string, unknown>
  const positiveInt = (key: string, min = 1, optional = false): number | undefined => {
    const value = raw[key]
    if (value === undefined && optional) return undefined
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min)
      problems.push(`${key} must be an integer of at least ${min}`)
    return value as number
  }
  if (typeof raw.sandboxId !== 'string' || !SANDBOX_ID_PATTERN.test(raw.sandboxId))
    problems.push('sandboxId must look like sbx_ and 26 base-32 characters')
  if (raw.template !== undefined && (typeof raw.template !== 'string' || raw.template.length === 0))
    problems.push('template must be a non-empty string')
  let agentSnapshot: ValidCreateRequest['agentSnapshot']
  if (raw.agentSnapshot !== undefined) {
    const snapshot = raw.agentSnapshot as Record<string, unknown>
    const refProblemsFound = refProblems(snapshot, 'agentSnapshot')
    if (refProblemsFound.length > 0) problems.push(...refProblemsFound)
    else
      agentSnapshot = {
        orgId: String(snapshot.orgId),
        agentId: String(snapshot.agentId),
        version: String(snapshot.version),
      }
  }
  // The engine refuses memory limits below 6 MiB.
  const memoryLimitMb = positiveInt('memoryLimitMb', 6)
  const maxProcesses = positiveInt('maxProcesses', 1)
  const timeoutMs = positiveInt('timeoutMs', 1, true)
  const agentVsockPort = positiveInt('agentVsockPort', 1)
  if (typeof raw.agentSecret !== 'string' || raw.agentSecret.length < 16)
    problems.push('agentSecret must be a string of at least 16 characters')
  let egressAllowlist: string[] | undefined
  if (raw.egressAllowlist !== undefined) {
    if (
      !Array.isArray(raw.egressAllowlist) ||
      raw.egressAllowlist.some((host) => typeof host !== 'string')
    )
      problems.push('egressAllowlist must be an array of host names')
    else egressAllowlist = raw.egressAllowlist as string[]
  }
  const labels: Record<string, string> = {}
  if (raw.labels !== undefined) {
    if (typeof raw.labels !== 'object' || raw.labels === null)
      problems.push('labels must be an object of strings')
    else {
      for (const [key, value] of Object.entries(raw.labels)) {
        if (!LABEL_KEY.test(key) || typeof value !== 'string')
          problems.push(`label ${key} is not a valid key with a string value`)
        else labels[key] = value
      }
    }
  }
  if (problems.length > 0) return { problems }
  return {
    problems,
    request: {
      sandboxId: raw.sandboxId as string,
      template: raw.template as string | undefined,
      agentSnapshot,
      memoryLimitMb: memoryLimitMb!,
      maxProcesses: maxProcesses!,
      timeoutMs,
      egressAllowlist,
      agentVsockPort: agentVsockPort!,
      agentSecret: raw.agentSecret as string,
      labels,
    },
  }
}
