import { type AgentHealthReport, SandboxReadinessError } from '@cordon/core'

/**
 * Refuses a guest whose agent shares its uid with the sandbox's code (README:
 * "The agent must be out of the sandbox's reach"). Such code can read the
 * agent's memory for its secret, signal it, or take its socket, and answer
 * the host as the agent. The agent's own word is taken at create and connect:
 * before any sandbox code has run (create), or over a connection only the
 * secret opens (connect); a guest built to lie here is not one a host chose.
 */
export function requireAgentOutOfReach(health: AgentHealthReport, sandboxId: string): void {
  if (health.commandsUnderOtherUid === true) return
  throw new SandboxReadinessError(
    "the guest's agent runs commands under its own uid, so sandbox code could impersonate it; a conforming guest runs the agent as root with CORDON_AGENT_RUN_AS set to a uid of that guest alone (README: guest requirements)",
    sandboxId,
  )
}
