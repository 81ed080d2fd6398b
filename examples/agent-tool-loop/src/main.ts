/**
 * A minimal agent tool loop. A model (here a scripted stand-in for an LLM)
 * reads the transcript and asks for one tool call at a time; the host runs
 * each call in the task's sandbox and appends what came back, until the
 * model answers. Everything the model chooses runs in the sandbox: with the
 * default `deny-all` policy it has no network, and each command has a
 * timeout and an output cap.
 */
import { type CordonSandbox, createSandboxProvider } from '@cordon/sandbox'

type ToolCall =
  | { readonly tool: 'run'; readonly command: string; readonly args: readonly string[] }
  | { readonly tool: 'write'; readonly path: string; readonly content: string }
  | { readonly tool: 'read'; readonly path: string }

type Turn =
  | { readonly role: 'user'; readonly text: string }
  | { readonly role: 'model'; readonly call: ToolCall }
  | { readonly role: 'tool'; readonly output: string }
  | { readonly role: 'answer'; readonly text: string }

interface Model {
  next(transcript: readonly Turn[]): ToolCall | { readonly answer: string }
}

/**
 * Stands in for an LLM so the example runs without network or keys: it
 * writes a small script, runs it, checks its output file, and answers with
 * what the sandbox reported.
 */
const scriptedModel: Model = {
  next(transcript) {
    const calls = transcript.filter((turn) => turn.role === 'model').length
    const last = transcript.at(-1)
    switch (calls) {
      case 0:
        return {
          tool: 'write',
          path: 'sum.sh',
          content: [
            '#!/bin/sh',
            '# Sum column b of data.csv, skipping the header.',
            "awk -F, 'NR > 1 { total += $2 } END { print total }' data.csv > total.txt",
            'cat total.txt',
          ].join('\n'),
        }
      case 1:
        return { tool: 'run', command: 'sh', args: ['sum.sh'] }
      case 2:
        return { tool: 'read', path: 'total.txt' }
      default:
        return {
          answer: `The total of column b is ${last?.role === 'tool' ? last.output.trim() : '?'}.`,
        }
    }
  },
}

async function runTool(sandbox: CordonSandbox, call: ToolCall): Promise<string> {
  switch (call.tool) {
    case 'run': {
      const result = await sandbox.exec(call.command, call.args, {
        timeout: 10_000,
        maxOutputBytes: 64 * 1024,
      })
      const flags = [
        result.timedOut ? 'timed out' : '',
        result.stdoutTruncated ? 'output truncated' : '',
      ].filter(Boolean)
      return `exit ${result.exitCode}${flags.length ? ` (${flags.join(', ')})` : ''}\n${result.stdout}${result.stderr}`
    }
    case 'write':
      await sandbox.writeFile(call.path, call.content)
      return `wrote ${call.content.length} bytes to ${call.path}`
    case 'read':
      return (await sandbox.readFile(call.path)).toString('utf8')
  }
}

export async function runTask(
  model: Model,
  question: string,
  files: Readonly<Record<string, string>>,
): Promise<Turn[]> {
  await using provider = createSandboxProvider({
    backend: { tier: 'container', image: process.env.CORDON_IMAGE ?? 'cordon-test/busybox:latest' },
    layout: { outputs: { source: { type: 'ephemeral' } } },
  })
  await using sandbox = await provider.create()
  for (const [path, content] of Object.entries(files)) await sandbox.writeFile(path, content)
  const transcript: Turn[] = [{ role: 'user', text: question }]
  for (let step = 0; step < 10; step++) {
    const decision = model.next(transcript)
    if ('answer' in decision) {
      transcript.push({ role: 'answer', text: decision.answer })
      return transcript
    }
    transcript.push({ role: 'model', call: decision })
    transcript.push({ role: 'tool', output: await runTool(sandbox, decision) })
  }
  transcript.push({ role: 'answer', text: 'gave up after 10 steps' })
  return transcript
}

const transcript = await runTask(scriptedModel, 'What is the total of column b?', {
  'data.csv': 'a,b\nx,3\ny,4\nz,35\n',
})
for (const turn of transcript) console.log(JSON.stringify(turn))
