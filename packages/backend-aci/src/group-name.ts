import type { SandboxConfigIssue, SandboxId } from '@cordon/core'

/** ACI's limit on container group names. */
const MAX_GROUP_NAME = 63
/** A sandbox id's random part: 26 base-32 characters. */
const ID_PART = 26

/**
 * The container group a sandbox claims is named `<prefix>-<random part of the
 * sandbox id>`: chosen before the PUT, so a create whose answer never arrived
 * can still be deleted by name.
 */
export function groupNameFor(prefix: string, sandboxId: SandboxId): string {
  return `${prefix}-${sandboxId.slice('sbx_'.length)}`
}

/** Problems that make a prefix give names ACI refuses (lowercase letters, digits, single inner hyphens, at most 63). */
export function namePrefixProblems(prefix: string): SandboxConfigIssue[] {
  const problems: SandboxConfigIssue[] = []
  const at = 'containerNamePrefix'
  if (prefix.length + 1 + ID_PART > MAX_GROUP_NAME) {
    problems.push({
      path: at,
      message: `at most ${MAX_GROUP_NAME - 1 - ID_PART} characters: group names are limited to ${MAX_GROUP_NAME}`,
    })
  }
  if (!/^[a-z0-9]/.test(prefix) || prefix.endsWith('-') || prefix.includes('--')) {
    problems.push({
      path: at,
      message: 'must start with a letter or digit, and not end in or repeat "-"',
    })
  }
  return problems
}
