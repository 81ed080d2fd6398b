import { Runner } from '@openai/agents-core'
import { filesystem, Manifest, SandboxAgent, shell } from '@openai/agents-core/sandbox'
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
} from '@openai/agents-core/testing'
import { afterAll, describe, expect, it } from 'vitest'
import { CordonSandboxClient, type CordonSandboxSession } from '../src/index.js'
import { testProvider } from './test-run.js'

/**
 * The SDK drives: its own runner and a scripted model issue `exec_command`
 * and `apply_patch` tool calls, the SDK's shell and filesystem capabilities
 * carry them to the session, and the assertions look inside the real Docker
 * sandbox the client made from the manifest.
 */
const provider = testProvider()
afterAll(async () => {
  await provider.close()
})

describe('the OpenAI Agents SDK runs its agent loop in a cordon sandbox', () => {
  it('applies the manifest at create, then runs the model’s commands and patches inside the sandbox', async () => {
    const client = new CordonSandboxClient(provider)
    let session: CordonSandboxSession | undefined
    let inside: Record<string, string | undefined> = {}
    const model = new ScriptedModel([
      [
        functionCall(
          'exec_command',
          { cmd: 'cat notes/hello.txt; echo "task=$TASK"; pwd; id -u' },
          { callId: 'c1' },
        ),
      ],
      [
        {
          type: 'apply_patch_call',
          callId: 'c2',
          status: 'completed',
          operation: { type: 'create_file', path: 'src/answer.txt', diff: '+forty\n+two\n' },
        },
      ],
      [
        {
          type: 'apply_patch_call',
          callId: 'c3',
          status: 'completed',
          operation: {
            type: 'update_file',
            path: 'src/answer.txt',
            diff: '@@\n forty\n-two\n+2\n',
          },
        },
      ],
      [
        functionCall(
          'exec_command',
          { cmd: 'wc -l < src/answer.txt > count.txt; exit 3' },
          { callId: 'c4' },
        ),
      ],
      // Before answering, look inside the sandbox (the runner destroys it after the run).
      modelResponder(async () => {
        const sandbox = session?.sandbox
        inside = {
          answer: (await sandbox?.readFile('/workspace/src/answer.txt'))?.toString(),
          count: (await sandbox?.readFile('/workspace/count.txt'))?.toString().trim(),
          manifest: (await sandbox?.readFile('/workspace/notes/hello.txt'))?.toString(),
        }
        return [assistantMessage('done')]
      }),
    ])
    const agent = new SandboxAgent({
      name: 'worker',
      model,
      instructions: 'Do the task.',
      capabilities: [filesystem(), shell()],
      defaultManifest: new Manifest({
        entries: {
          notes: {
            type: 'dir',
            children: { 'hello.txt': { type: 'file', content: 'from the manifest\n' } },
          },
        },
        environment: { TASK: 'forty-two' },
      }),
    })
    const created = client.create.bind(client)
    client.create = (async (...args: Parameters<typeof created>) => {
      session = await created(...args)
      return session
    }) as typeof client.create
    const result = await new Runner().run(agent, 'go', { sandbox: { client } })
    expect(result.finalOutput).toBe('done')
    model.assertComplete()

    // What the first command printed went back to the model as the tool output.
    const firstOutput = JSON.stringify(model.calls[1]?.request.input)
    expect(firstOutput).toContain('from the manifest')
    expect(firstOutput).toContain('task=forty-two')
    expect(firstOutput).toContain('/workspace')
    const lastOutput = JSON.stringify(model.calls[4]?.request.input)
    expect(lastOutput).toMatch(/exit code 3|Process exited with code 3/i)

    // applyDiff's create mode joins the lines without a final newline.
    expect(inside).toEqual({ answer: 'forty\n2', count: '1', manifest: 'from the manifest\n' })
    // The sandbox was destroyed by the runner (the client owned the session).
    expect(session?.sandbox.status).toBe('destroyed')
  })

  it('leaves a sandbox it did not create to its owner, and the files are where the model put them', async () => {
    const client = new CordonSandboxClient(provider)
    const session = await client.create({
      manifest: { entries: { 'in.txt': { type: 'file', content: 'x\n' } } },
    })
    try {
      const model = new ScriptedModel([
        [
          functionCall(
            'exec_command',
            { cmd: 'mkdir -p out && cp in.txt out/copy.txt && echo made > out/new.txt' },
            { callId: 'c1' },
          ),
        ],
        [
          {
            type: 'apply_patch_call',
            callId: 'c2',
            status: 'completed',
            operation: { type: 'delete_file', path: 'in.txt' },
          },
        ],
        [assistantMessage('ok')],
      ])
      // The agent's own manifest entries reach a provided session through applyManifest.
      const agent = new SandboxAgent({
        name: 'w',
        model,
        capabilities: [filesystem(), shell()],
        defaultManifest: {
          entries: { 'out/agent.txt': { type: 'file', content: 'from the agent\n' } },
        },
      })
      await new Runner().run(agent, 'go', { sandbox: { session } })
      model.assertComplete()
      const files = (await session.sandbox.listFiles('/workspace')).map((file) => file.path).sort()
      expect(files).toEqual([
        '/workspace/out/agent.txt',
        '/workspace/out/copy.txt',
        '/workspace/out/new.txt',
      ])
      expect((await session.sandbox.readFile('/workspace/out/new.txt')).toString()).toBe('made\n')
      expect(session.sandbox.status).not.toBe('destroyed')
    } finally {
      await client.delete(session.state)
    }
    expect(session.sandbox.status).toBe('destroyed')
  })
})
