import { spawn, spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EXEC_GROUP_COUNT, EXEC_GROUP_FIRST } from '../src/exec-group.js'
import { requestExec, requestHealth } from '../src/protocol/index.js'
import {
  type AgentUnderTest,
  delay,
  LAUNCHER_PROGRAM,
  LAUNCHERS,
  runCommand,
  startAgentProcess,
} from './agent-harness.js'

/**
 * cordon-launcher must start commands as Node's spawn does (ids, groups,
 * signals, session, descriptors, OOM score, errors), so every probe here runs
 * under both and the answers are compared, besides being checked. One
 * difference, on purpose: Node hands a command sockets for its stdout and
 * stderr, the launcher hands it pipes (as `docker exec` and a shell do), so
 * `> /dev/stdout` works.
 */

const SANDBOX_USER = { uid: 1_073_742_100, gid: 1_073_742_100 }

const run = runCommand

/**
 * What a command can see of how it was started. Ids, signals, capabilities
 * and the OOM score are read by the started program about itself (a shell
 * would block signals around its own forks and show that instead).
 */
async function probe(agent: AgentUnderTest): Promise<string> {
  const parts = [
    await run(agent, 'grep', [
      '-E',
      '^(Uid|Gid|Groups|SigIgn|SigBlk|CapEff|CapPrm):',
      '/proc/self/status',
    ]),
    await run(agent, 'cat', ['/proc/self/oom_score_adj']),
    await run(agent, 'sh', [
      '-c',
      [
        'set -- $(cut -d")" -f2 /proc/$$/stat); echo "group leader: $([ "$3" = $$ ] && echo yes)"; echo "session leader: $([ "$4" = $$ ] && echo yes)"',
        'echo "fd 0: $(readlink /proc/$$/fd/0)"',
        'echo "cwd: $(pwd)"',
      ].join('; '),
    ]),
  ]
  for (const part of parts) expect(part.exit.exitCode).toBe(0)
  const [status, oom, shell] = parts.map((part) => part.stdout)
  return `${status}oom: ${oom}${shell}`.replaceAll(agent.outputs, '<outputs>')
}

/**
 * A probe's text with signals 32 and 33 taken out of its ignored set. Node's
 * spawn (libuv) resets dispositions through glibc, which refuses the two
 * signals it keeps for itself, so a command it starts keeps them ignored if
 * the agent's parent left them so (pnpm does); cordon-launcher resets them
 * with the kernel's call. The comparison with Node's spawn is on the rest.
 */
function withoutGlibcSignals(probeText: string): string {
  return probeText.replace(/^SigIgn:\t([0-9a-f]+)$/m, (_, mask: string) => {
    const kept = BigInt(`0x${mask}`) & ~(3n << 31n)
    return `SigIgn:\t${kept.toString(16).padStart(mask.length, '0')}`
  })
}

/** The name of the process that started the command (a launcher, or the agent itself). */
function parentName(agent: AgentUnderTest, pid: number): string {
  const ppid = parentOf(pid)
  const name = readFileSync(`/proc/${ppid}/comm`, 'latin1').trim()
  return name !== 'cordon-launcher' && ppid === agent.child.pid ? 'agent' : name
}

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1')
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
}

function launcherPids(agentPid: number): number[] {
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'latin1')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === agentPid && stat.includes('(cordon-launcher)')) pids.push(Number(entry))
    } catch {
      // Gone meanwhile.
    }
  }
  return pids
}

const isRoot = process.getuid?.() === 0

describe('starting commands: cordon-launcher behaves as Node spawn does', () => {
  const agents = new Map<string, AgentUnderTest>()
  const asUser = new Map<string, AgentUnderTest>()
  beforeAll(async () => {
    for (const [name, { env, startedByLauncher }] of LAUNCHERS) {
      agents.set(name, await startAgentProcess({ env: { ...env }, startedByLauncher }))
      if (isRoot) {
        const agent = await startAgentProcess({
          env: { ...env, CORDON_AGENT_RUN_AS: `${SANDBOX_USER.uid}:${SANDBOX_USER.gid}` },
          startedByLauncher,
        })
        await chmod(agent.dir, 0o755)
        await chmod(agent.outputs, 0o777)
        asUser.set(name, agent)
      }
    }
  })
  afterAll(async () => {
    for (const agent of [...agents.values(), ...asUser.values()]) await agent.stop()
  })

  it('the same ids, groups, signals, session, descriptors and OOM score under each', async () => {
    const seen = new Map<string, string>()
    for (const [name] of LAUNCHERS) {
      const agent = agents.get(name)!
      seen.set(name, await probe(agent))
    }
    const [node, native, parent] = [...seen.values()]
    expect(native).toBe(withoutGlibcSignals(node!))
    expect(parent).toBe(withoutGlibcSignals(node!))
    expect(native).toContain('SigIgn:\t0000000000000000')
    expect(native).toContain('SigBlk:\t0000000000000000')
    expect(native).toContain('oom: 1000')
    expect(native).toContain('group leader: yes')
    expect(native).toContain('session leader: yes')
    expect(native).toContain('fd 0: /dev/null')
    expect(native).toContain('cwd: <outputs>')
  })

  it('with cordon-launcher, a command runs under its system call filter, with no new privileges', async () => {
    // The one difference from Node's spawn on purpose (see the launcher's install_syscall_filter).
    for (const name of ['cordon-launcher', 'cordon-launcher (parent)']) {
      const status = await run(agents.get(name)!, 'grep', [
        '-E',
        '^(NoNewPrivs|Seccomp):',
        '/proc/self/status',
      ])
      expect(status.stdout, name).toBe('NoNewPrivs:\t1\nSeccomp:\t2\n')
    }
  })

  it('with cordon-launcher, a command starts with default signals even where the agent inherited some ignored, 32 and 33 among them', async () => {
    // glibc keeps 32 and 33 for itself and refuses to change them through
    // sigaction(), so only a raw system call sets them: a small program does,
    // then starts the agent (pnpm, for one, leaves them ignored). It ignores
    // a few ordinary ones too (a shell's background job ignores SIGINT and
    // SIGQUIT): the launcher resets only what it finds not default, so each
    // kind must be found.
    const dir = await mkdtemp(join(tmpdir(), 'cordon-signals-'))
    const source = join(dir, 'ignore-glibc-signals.c')
    await writeFile(
      source,
      [
        '#define _GNU_SOURCE',
        '#include <signal.h>',
        '#include <sys/syscall.h>',
        '#include <unistd.h>',
        'int main(int argc, char **argv) {',
        '  unsigned long action[4] = {(unsigned long)SIG_IGN, 0, 0, 0};',
        '  int ignored[] = {SIGINT, SIGQUIT, SIGUSR2, SIGWINCH, 32, 33, 64};',
        '  for (int i = 0; i < 7; i++) syscall(SYS_rt_sigaction, ignored[i], action, 0, sizeof(unsigned long));',
        '  execvp(argv[1], argv + 1);',
        '  return 127;',
        '}',
      ].join('\n'),
    )
    const helper = join(dir, 'ignore-glibc-signals')
    const compiled = spawnSync('gcc', ['-O2', '-o', helper, source], { encoding: 'utf8' })
    expect(compiled.status, compiled.stderr).toBe(0)
    try {
      for (const [name, { env, startedByLauncher }] of LAUNCHERS) {
        if (!env.CORDON_AGENT_LAUNCHER) continue
        const agent = await startAgentProcess({ env, startedByLauncher, prefix: [helper] })
        try {
          const agentPid = startedByLauncher
            ? Number(
                readFileSync(
                  `/proc/${agent.child.pid}/task/${agent.child.pid}/children`,
                  'utf8',
                ).trim(),
              )
            : agent.child.pid!
          // The agent itself runs with 32 ignored (Node's own start-up takes 33 back)...
          const agentIgnores = /^SigIgn:\t([0-9a-f]+)$/m.exec(
            readFileSync(`/proc/${agentPid}/status`, 'utf8'),
          )![1]!
          expect((BigInt(`0x${agentIgnores}`) >> 31n) & 1n, name).toBe(1n)
          // ...and the command it starts ignores nothing.
          const { stdout } = await run(agent, 'grep', ['^SigIgn:', '/proc/self/status'])
          expect(stdout, name).toBe('SigIgn:\t0000000000000000\n')
        } finally {
          await agent.stop()
        }
      }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('with cordon-launcher, only the three standard descriptors reach a command', async () => {
    // Even one the agent inherited without close-on-exec (this test's runner
    // leaves some open; Node's spawn passes them on).
    for (const name of ['cordon-launcher', 'cordon-launcher (parent)']) {
      const { stdout } = await run(agents.get(name)!, 'ls', ['/proc/self/fd'])
      // ls's own descriptor on the directory it lists is the 3.
      expect(stdout, name).toBe('0\n1\n2\n3\n')
    }
  })

  it('with cordon-launcher, output descriptors are pipes, so a command can open /dev/stdout', async () => {
    const agent = agents.get('cordon-launcher')!
    const { exit, stdout } = await run(agent, 'sh', [
      '-c',
      'readlink /proc/$$/fd/1 /proc/$$/fd/2 | sed "s/:.*//"; echo to-stdout > /dev/stdout',
    ])
    expect(exit.exitCode).toBe(0)
    expect(stdout).toBe('pipe\npipe\nto-stdout\n')
  })

  it.runIf(isRoot)(
    "as the sandbox user: its ids, no supplementary groups but cordon-launcher's exec tag, no capabilities",
    async () => {
      const seen: string[] = []
      for (const [name] of LAUNCHERS) {
        const agent = asUser.get(name)!
        seen.push(await probe(agent))
      }
      // Node's spawn cannot tag a command: its commands have no supplementary group at all.
      expect(seen[0]).toMatch(/Groups:\s*\n/)
      // The launcher's carry one, their exec's tag (exec-group.ts), and are otherwise the same.
      const tags = seen.map((text) => /^Groups:\s*(\d+)\s*$/m.exec(text)?.[1])
      for (const tag of tags.slice(1)) {
        expect(Number(tag)).toBeGreaterThanOrEqual(EXEC_GROUP_FIRST)
        expect(Number(tag)).toBeLessThan(EXEC_GROUP_FIRST + EXEC_GROUP_COUNT)
      }
      const untagged = (text: string) => text.replace(/^Groups:.*$/m, 'Groups:\t')
      expect(untagged(seen[1]!)).toBe(untagged(withoutGlibcSignals(seen[0]!)))
      expect(untagged(seen[2]!)).toBe(untagged(withoutGlibcSignals(seen[0]!)))
      const id = SANDBOX_USER.uid
      expect(seen[1]).toContain(`Uid:\t${id}\t${id}\t${id}\t${id}`)
      expect(seen[1]).toContain(`Gid:\t${id}\t${id}\t${id}\t${id}`)
      expect(seen[1]).toContain('CapEff:\t0000000000000000')
      expect(seen[1]).toContain('CapPrm:\t0000000000000000')
    },
  )

  it.runIf(isRoot)(
    'with only the capabilities of a Docker sandbox agent, commands start as the sandbox user, again and again',
    async () => {
      // SETUID, SETGID, KILL, DAC_OVERRIDE and SYS_PTRACE: none of them reaches a command.
      for (const [name, { env, startedByLauncher }] of LAUNCHERS) {
        const agent = await startAgentProcess({
          env: { ...env, CORDON_AGENT_RUN_AS: `${SANDBOX_USER.uid}:${SANDBOX_USER.gid}` },
          sandboxCapabilities: true,
          startedByLauncher,
        })
        try {
          await chmod(agent.dir, 0o755)
          await chmod(agent.outputs, 0o777)
          for (let i = 0; i < 5; i++) {
            const { exit, stdout, stderr } = await run(agent, 'sh', [
              '-c',
              'id -u; grep CapEff /proc/self/status',
            ])
            expect({ exitCode: exit.exitCode, stderr }, name).toEqual({ exitCode: 0, stderr: '' })
            expect(stdout, name).toBe(`${SANDBOX_USER.uid}\nCapEff:\t0000000000000000\n`)
          }
          const agentCaps = readFileSync(`/proc/${agent.child.pid}/status`, 'latin1')
          expect(agentCaps, name).toContain('CapEff:\t00000000000800e2')
        } finally {
          await agent.stop()
        }
      }
    },
  )

  it('cordon-launcher is what starts the commands when configured', async () => {
    for (const [name] of LAUNCHERS) {
      const agent = agents.get(name)!
      const connection = await agent.connect()
      const session = await requestExec(connection, {
        command: 'sleep',
        args: ['5'],
        env: {},
        stdin: false,
      })
      expect(parentName(agent, session.pid)).toBe(
        name.startsWith('cordon-launcher') ? 'cordon-launcher' : 'agent',
      )
      await session.cancel('SIGKILL', 'abort')
      await session.result
      connection.destroy()
    }
  })

  it('reports commands that cannot start as a shell does: 127 not found, 126 not executable', async () => {
    for (const [name] of LAUNCHERS) {
      const agent = agents.get(name)!
      const bin = join(agent.dir, `bin-${name.replace(/\W/g, '')}`)
      const later = join(agent.dir, `later-${name.replace(/\W/g, '')}`)
      await mkdir(bin)
      await mkdir(later)
      await writeFile(join(bin, 'tool'), '#!/bin/sh\necho never\n', { mode: 0o644 })
      await writeFile(join(later, 'tool'), '#!/bin/sh\necho found-later\n', { mode: 0o755 })
      await writeFile(join(bin, 'only-here'), '#!/bin/sh\necho never\n', { mode: 0o644 })
      const path = { PATH: `/no/such/dir:${bin}:${later}:/usr/bin:/bin` }

      const missing = await run(agent, 'no-such-command-anywhere', [], { env: path })
      expect(missing.exit.exitCode, name).toBe(127)
      expect(missing.stderr, name).toContain('not found')
      // A file found but not executable does not stop the search...
      const later_ = await run(agent, 'tool', [], { env: path })
      expect(later_.exit.exitCode, name).toBe(0)
      expect(later_.stdout, name).toBe('found-later\n')
      // ...and is what is reported when nothing better is found.
      expect((await run(agent, 'only-here', [], { env: path })).exit.exitCode, name).toBe(126)
      expect((await run(agent, join(bin, 'tool'), [])).exit.exitCode, name).toBe(126)
      // An argument longer than the kernel takes (E2BIG).
      const huge = await run(agent, 'true', ['x'.repeat(200_000)])
      expect(huge.exit.exitCode, name).toBe(126)
      expect(huge.stderr, name).toContain('E2BIG')
    }
  })

  it('input to a command that never reads it, or is already gone, ends cleanly', async () => {
    for (const [name] of LAUNCHERS) {
      const agent = agents.get(name)!
      // Twenty times: the agent's acknowledgements after the exit report once
      // broke the connection before the host had read it, about one exec in seven.
      for (let i = 0; i < 20; i++) {
        const gone = await run(agent, 'true', [], { stdin: Buffer.alloc(1_000_000, 1) })
        expect(gone.exit.exitCode, name).toBe(0)
      }
      const closes = await run(agent, 'sh', ['-c', 'exec 0<&-; sleep 0.2; echo still-here'], {
        stdin: Buffer.alloc(500_000, 1),
      })
      expect(closes.exit.exitCode, name).toBe(0)
      expect(closes.stdout, name).toBe('still-here\n')
    }
  })

  it('many commands at once each get their own output', async () => {
    for (const [name] of LAUNCHERS) {
      const agent = agents.get(name)!
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          run(agent, 'sh', ['-c', `head -c ${10_000 + i} /dev/zero | tr "\\0" "${i % 10}"`]),
        ),
      )
      results.forEach((result, i) => {
        expect(result.exit.exitCode, name).toBe(0)
        expect(result.stdout, name).toBe(String(i % 10).repeat(10_000 + i))
      })
    }
  })

  it('a launcher killed behind the agent is replaced at the next command', async () => {
    const agent = agents.get('cordon-launcher')!
    const before = launcherPids(agent.child.pid!)
    expect(before).toHaveLength(1)
    process.kill(before[0]!, 'SIGKILL')
    // A command sent before the agent has seen the launcher's end fails (it
    // may have been started: it is not sent again); the next one after gets
    // a new launcher.
    for (let i = 0; i < 200 && !agent.stderr().includes('the launcher exited'); i++) await delay(50)
    const { exit, stdout } = await run(agent, 'echo', ['after'])
    expect(exit.exitCode).toBe(0)
    expect(stdout).toBe('after\n')
    const after = launcherPids(agent.child.pid!)
    expect(after).toHaveLength(1)
    expect(after[0]).not.toBe(before[0])
    expect(agent.stderr()).toContain('the launcher exited')
  })

  it('a launcher that cannot start leaves commands to Node spawn, and says so', async () => {
    const agent = await startAgentProcess({ env: { CORDON_AGENT_LAUNCHER: '/no/such/launcher' } })
    try {
      const { exit, stdout } = await run(agent, 'echo', ['fallback'])
      expect(exit.exitCode).toBe(0)
      expect(stdout).toBe('fallback\n')
      expect(agent.stderr()).toContain("commands start with Node's spawn instead")
    } finally {
      await agent.stop()
    }
  })
})

describe("cordon-launcher --agent: the launcher starts the agent (a Docker sandbox's entry)", () => {
  it("the agent uses its parent and starts no launcher of its own; commands are the parent's children", async () => {
    const agent = await startAgentProcess({
      env: { CORDON_AGENT_LAUNCHER: LAUNCHER_PROGRAM },
      startedByLauncher: true,
    })
    try {
      const connection = await agent.connect()
      const { pid: agentPid } = await requestHealth(connection)
      connection.destroy()
      const launcherPid = agent.child.pid!
      expect(parentOf(agentPid)).toBe(launcherPid)
      const exec = await agent.connect()
      const session = await requestExec(exec, {
        command: 'sleep',
        args: ['5'],
        env: {},
        stdin: false,
      })
      expect(parentOf(session.pid)).toBe(launcherPid)
      // No fork of the agent at start-up: no launcher is the agent's child.
      expect(launcherPids(agentPid)).toEqual([])
      await session.cancel('SIGKILL', 'abort')
      await session.result
      exec.destroy()
      // The pipes came through the environment, which commands do not see.
      const { stdout } = await run(agent, 'sh', ['-c', 'env | grep -c CORDON_AGENT || true'])
      expect(stdout.trim()).toBe('0')
    } finally {
      await agent.stop()
    }
  })

  it('takes its parent launcher even with none named to start: its pipes never reach a command', async () => {
    const agent = await startAgentProcess({ startedByLauncher: true })
    try {
      const { stdout } = await run(agent, 'sh', [
        '-c',
        'echo "parent: $(cat /proc/$PPID/comm)"; ls /proc/$$/fd',
      ])
      // Run by the launcher, not by Node's spawn; the shell holds its three standard descriptors only.
      expect(stdout).toBe('parent: cordon-launcher\n0\n1\n2\n')
    } finally {
      await agent.stop()
    }
  })

  it("passes the signals an init sends on to the agent, and ends with the agent's status", async () => {
    const agent = await startAgentProcess({
      env: { CORDON_AGENT_LAUNCHER: LAUNCHER_PROGRAM },
      startedByLauncher: true,
    })
    try {
      // SIGHUP: the agent's resume signal; the launcher lives on.
      process.kill(agent.child.pid!, 'SIGHUP')
      await expect.poll(() => agent.stderr(), { timeout: 5_000 }).toContain('agent resumed')
      expect((await run(agent, 'echo', ['after-resume'])).stdout).toBe('after-resume\n')
      // SIGTERM: the agent stops (status 0), and the launcher with it.
      const exited = new Promise<number | null>((resolve) => agent.child.once('exit', resolve))
      process.kill(agent.child.pid!, 'SIGTERM')
      expect(await exited).toBe(0)
    } finally {
      await agent.stop()
    }
  })

  it('passes on each signal an init sends: TERM, INT, HUP, QUIT, USR1, USR2', async () => {
    for (const signal of ['TERM', 'INT', 'HUP', 'QUIT', 'USR1', 'USR2'] as const) {
      // A stand-in agent that ends with 42 when the signal reaches it.
      const launcher = spawn(
        LAUNCHER_PROGRAM,
        [
          '--agent',
          '/bin/sh',
          '-c',
          `trap "exit 42" ${signal}; echo up; while :; do sleep 0.05; done`,
        ],
        { stdio: ['ignore', 'pipe', 'ignore'] },
      )
      await new Promise((resolve) => launcher.stdout!.once('data', resolve))
      const exited = new Promise<number | null>((resolve) => launcher.once('exit', resolve))
      launcher.kill(`SIG${signal}`)
      expect(await exited, signal).toBe(42)
    }
  })

  it("exits with the agent's status, 128 + the signal if it was killed, 127 if it cannot start it", () => {
    const status = (args: string[]) =>
      spawnSync(LAUNCHER_PROGRAM, ['--agent', ...args], { encoding: 'utf8' })
    expect(status(['/bin/sh', '-c', 'exit 7']).status).toBe(7)
    expect(status(['/bin/sh', '-c', 'kill -9 $$']).status).toBe(137)
    // The agent gets its pipes as 3 and 4, named in its environment.
    const seen = status([
      '/bin/sh',
      '-c',
      'echo $CORDON_AGENT_LAUNCHER_FDS; read line <&4; echo "$line"',
    ])
    expect(seen.stdout).toMatch(/^3,4\nready \d+\n$/)
    const missing = status(['/no/such/agent'])
    expect(missing.status).toBe(127)
    expect(missing.stderr).toContain('cannot start the agent')
    // Anything else is refused rather than guessed at.
    const wrong = spawnSync(LAUNCHER_PROGRAM, ['--agnet', 'x'], { encoding: 'utf8' })
    expect(wrong.status).toBe(2)
    expect(wrong.stderr).toContain('usage')
  })
})
