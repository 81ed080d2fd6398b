/**
 * Scenario 10: one scripted agent task through the OpenAI Agents SDK's own
 * runner, with the SDK's `DockerSandboxClient` (which drives the `docker`
 * command line once per operation) and with `@cordon/openai-agents` on the
 * same engine and image. The SDK's `ScriptedModel` issues 50 tool calls of
 * shell and file work (`exec_command` and `apply_patch`), so both arms run
 * exactly the same tool calls through exactly the same SDK code; only the
 * sandbox client differs.
 */

import { CordonSandboxClient } from '@cordon/openai-agents'
import { Runner } from '@openai/agents-core'
import {
  filesystem,
  Manifest,
  SandboxAgent,
  type SandboxClient,
  shell,
} from '@openai/agents-core/sandbox'
import { DockerSandboxClient } from '@openai/agents-core/sandbox/local'
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
  type ScriptedModelInput,
} from '@openai/agents-core/testing'
import { cordonProvider } from './cordon.js'
import { BENCH_LABELS, docker } from './engine.js'
import { DIFFERENT_BY_DESIGN, hardeningFingerprint } from './hardening-parity.js'
import { interleave } from './interleave.js'
import { ensureGnuToolsImage } from './peers/gnu-tools-image.js'
import type { Scenario } from './scenario.js'
import { formatMs, formatRatio, ratio, summarize } from './stats.js'

const TOOL_CALLS = 50

/** A fresh manifest per run: the SDK's runner owns and mutates what it is given. */
const manifest = () =>
  new Manifest({
    environment: { TASK: 'bench' },
    entries: { 'README.md': { type: 'file', content: '# scripted task\n' } },
  })

/**
 * The task: five kinds of call in turn, ten times over (append to a log and
 * count it; create a file; read it back; patch it; count the patched files).
 * The final step checks the last tool output and fails the run if the work
 * did not happen as scripted.
 */
function scriptedTask(): ScriptedModelInput[] {
  const steps: ScriptedModelInput[] = []
  for (let i = 0; i < TOOL_CALLS; i++) {
    const callId = `call-${i}`
    switch (i % 5) {
      case 0:
        steps.push([
          functionCall(
            'exec_command',
            {
              cmd: `mkdir -p src logs && echo "step ${i}" >> logs/run.log && wc -l < logs/run.log`,
            },
            { callId },
          ),
        ])
        break
      case 1:
        steps.push([
          {
            type: 'apply_patch_call',
            callId,
            status: 'completed',
            operation: { type: 'create_file', path: `src/m${i}.txt`, diff: `+value ${i}\n+end\n` },
          },
        ])
        break
      case 2:
        steps.push([
          functionCall(
            'exec_command',
            { cmd: `cat src/m${i - 1}.txt && ls src | wc -l` },
            { callId },
          ),
        ])
        break
      case 3:
        steps.push([
          {
            type: 'apply_patch_call',
            callId,
            status: 'completed',
            operation: {
              type: 'update_file',
              path: `src/m${i - 2}.txt`,
              diff: `@@\n value ${i - 2}\n-end\n+done\n`,
            },
          },
        ])
        break
      default:
        steps.push([
          functionCall(
            'exec_command',
            { cmd: 'cat src/*.txt | grep -c done; echo "$TASK"' },
            { callId },
          ),
        ])
    }
  }
  steps.push(
    modelResponder((call) => {
      const input = call.request.input
      const last = JSON.stringify(Array.isArray(input) ? input.at(-1) : input)
      if (!last.includes(`${TOOL_CALLS / 5}\\nbench`)) {
        throw new Error(`the scripted task went wrong; last tool output: ${last}`)
      }
      return [assistantMessage('done')]
    }),
  )
  return steps
}

async function runTask(client: SandboxClient): Promise<void> {
  const model = new ScriptedModel(scriptedTask())
  const agent = new SandboxAgent({
    name: 'bench',
    model,
    instructions: 'Do the scripted task.',
    capabilities: [filesystem(), shell()],
    defaultManifest: manifest(),
  })
  const result = await new Runner({ tracingDisabled: true }).run(agent, 'go', {
    sandbox: { client },
    maxTurns: TOOL_CALLS + 1,
  })
  if (result.finalOutput !== 'done')
    throw new Error(`unexpected final output ${result.finalOutput}`)
  model.assertComplete()
}

/** The hardening the engine reports for one session's container, and the uid its commands run as. */
async function hardening(containerId: string, commandUid: string): Promise<string> {
  const f = await hardeningFingerprint(containerId)
  const memory =
    Number(f.memory) > 0 ? `${Math.round(Number(f.memory) / 2 ** 20)} MiB` : 'unlimited'
  const pids = Number(f.pidsLimit) > 0 ? f.pidsLimit : 'unlimited'
  const cpus = Number(f.nanoCpus) > 0 ? String(Number(f.nanoCpus) / 1e9) : 'unlimited'
  return [
    `commands as uid ${commandUid}`,
    f.capDrop === 'null' && f.capAdd === 'null'
      ? "capabilities: the engine's default set"
      : `capabilities: drop ${f.capDrop}, add ${f.capAdd}`,
    `read-only root ${f.readOnlyRootfs}`,
    `security options ${f.securityOpt === 'null' ? 'none' : f.securityOpt}`,
    `network ${f.networkMode}`,
    `memory ${memory}`,
    `pids ${pids}`,
    `cpus ${cpus}`,
  ].join('; ')
}

export const agentSdkTask: Scenario = async ({ quick, log }) => {
  const image = await ensureGnuToolsImage()
  const provider = cordonProvider({ outputsPath: '/workspace', image })
  const cordon = new CordonSandboxClient(provider)
  // `networkMode: 'none'` is the SDK client's strongest network option; its
  // labels let the bench remove whatever a failed run leaves.
  const sdk = new DockerSandboxClient({
    image,
    labels: BENCH_LABELS,
    networkMode: 'none',
  })
  const warmup = 1
  const iterations = quick ? 3 : 5
  try {
    const samples = await interleave(
      [
        { name: 'cordon', run: () => runTask(cordon) },
        { name: 'sdk', run: () => runTask(sdk) },
      ],
      {
        warmup,
        iterations,
        onRun: (arm, round, ms, isWarmup) =>
          log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${formatMs(ms)}`),
      },
    )
    const cordonSummary = summarize(samples.get('cordon')!)
    const sdkSummary = summarize(samples.get('sdk')!)

    // One more session of each, untimed, to read the hardening off the engine.
    const cordonSession = await cordon.create(manifest())
    let cordonHardening: string
    try {
      const [container] = await docker.listContainers({
        filters: { label: [`cordon.sandbox=${cordonSession.sandbox.id}`] },
      })
      const uid = (await cordonSession.exec({ cmd: 'id -u' })).stdout.trim()
      cordonHardening = await hardening(container!.Id, uid)
    } finally {
      await cordon.delete(cordonSession.state)
    }
    const sdkSession = await sdk.create(manifest())
    let sdkHardening: string
    try {
      const uid = (await sdkSession.exec({ cmd: 'id -u' })).stdout.trim()
      sdkHardening = await hardening(sdkSession.state.containerId, uid)
    } finally {
      await sdkSession.close()
    }

    const perCall = (median: number) => formatMs(median / TOOL_CALLS)
    const value = ratio(cordonSummary, sdkSummary)
    return {
      id: 'agent-sdk-task',
      title: `10. An agent task of ${TOOL_CALLS} tool calls through the OpenAI Agents SDK`,
      method: `${warmup} warm-up + ${iterations} measured rounds per arm, round-robin. Timed: the SDK's \`Runner.run\` of a \`SandboxAgent\` (filesystem and shell capabilities) whose \`ScriptedModel\` makes ${TOOL_CALLS} tool calls, one per turn, 30 \`exec_command\` and 20 \`apply_patch\` (create, then update), from a manifest with one file and one environment variable: creating the sandbox, every tool call, and the runner's cleanup of the sandbox it created. Same engine, same image (\`${image}\`: the bench image plus GNU \`realpath\` and \`find\`, which the SDK's client needs), same SDK code; only the sandbox client differs.`,
      tables: [
        {
          caption: `Whole task (${TOOL_CALLS} tool calls, create and cleanup included)`,
          arms: [
            {
              name: '`@cordon/openai-agents` (`CordonSandboxClient`, Docker backend)',
              summary: cordonSummary,
              unit: 'ms',
              extra: { 'per tool call (median / 50)': perCall(cordonSummary.median) },
            },
            {
              name: "the SDK's `DockerSandboxClient` (`docker` CLI)",
              summary: sdkSummary,
              unit: 'ms',
              extra: { 'per tool call (median / 50)': perCall(sdkSummary.median) },
            },
          ],
        },
      ],
      comparisons: [
        {
          scenario: `10 agent task (${TOOL_CALLS} tool calls)`,
          what: "cordon / the OpenAI SDK's DockerSandboxClient",
          ratio: formatRatio(value),
          target: '≤ 0.20x',
          met: value <= 0.2,
        },
      ],
      notes: [
        `cordon's added capabilities: ${DIFFERENT_BY_DESIGN.capAdd}; its memory and process limits: ${DIFFERENT_BY_DESIGN.memory}, ${DIFFERENT_BY_DESIGN.pidsLimit}.`,
        "The SDK's client runs its container as the host user (root when the host runs as root, as here), with the engine's defaults otherwise; its workspace is a host directory bind-mounted at the manifest root. cordon's workspace is its ephemeral outputs mount at `/workspace`.",
      ],
      sections: [
        '#### Hardening of each arm, as the engine reports it',
        '| arm | hardening |\n| --- | --- |\n' +
          `| cordon | ${cordonHardening} |\n` +
          `| SDK \`DockerSandboxClient\` (\`networkMode: 'none'\`) | ${sdkHardening} |`,
      ],
    }
  } finally {
    await provider.close()
  }
}
