/**
 * The suite fails a backend that declares more or less than it does. Each
 * lie of the dishonest test backend (test/dishonest-backend.ts) is run
 * through the suite in a vitest of its own, and the report must show the
 * cases that lie breaks failing, and only those, while the same cases pass
 * against the honest variant of the same backend.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { beforeAll, describe, expect, it } from 'vitest'
import { LIES, type Lie } from './dishonest-backend.js'

/** The cases about declarations: those a stub backend can answer at all. */
const SELECTED = [
  'hands out an exec-ready sandbox',
  'declared enforcement',
  'memoryLimit declared',
  'processLimit declared',
  'denyAllNetwork declared',
  'stats reports every usage field',
  'openTerminal',
  'pause declared',
  'externalWatch declared',
  'volumes:',
]

/**
 * The cases each lie must fail, by the start of their titles. A case about
 * a control holds both halves (the proof where declared, the refusal where
 * not), so a lie that declares too much and one that declares too little
 * fail the same case.
 */
const FAILS: Readonly<Record<Exclude<Lie, 'honest'>, readonly string[]>> = {
  'memory-limit-ignored': [
    'memoryLimit declared: a memory bomb is killed',
    'sandbox.enforced reports the requested limits',
  ],
  'memory-limit-accepted': ['memoryLimit declared: a memory bomb is killed'],
  'egress-accepted': [
    'an egress kind not declared is refused',
    'denyAllNetwork declared: has no interface',
    'denyAllNetwork declared: cannot resolve names',
    'denyAllNetwork declared: cannot open TCP connections',
    'denyAllNetwork declared: cannot send UDP',
  ],
  'usage-missing': ['stats reports every usage field'],
  'wrong-environment': ['hands out an exec-ready sandbox'],
  'hidden-terminal': ['terminal declared: openTerminal'],
  'hidden-pause': ['pause declared: pause freezes every process'],
  'hidden-external-watch': ['externalWatch declared'],
  'volumes-accepted': ['volumes: declared'],
}

interface CaseResult {
  readonly ancestorTitles: readonly string[]
  readonly title: string
  readonly status: 'passed' | 'failed' | 'skipped' | 'pending' | 'todo'
  readonly failureMessages: readonly string[]
}

/** vitest's command-line program, as `vitest` on the PATH would start it. */
const VITEST = join(
  dirname(fileURLToPath(import.meta.resolve('vitest/package.json'))),
  'vitest.mjs',
)

const asPattern = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/** Runs the suite against every lie in a child vitest and returns its JSON report's cases. */
async function runSuiteAgainstLies(): Promise<CaseResult[]> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-dishonest-'))
  const report = join(dir, 'report.json')
  try {
    const config = fileURLToPath(new URL('./fixture/vitest.config.ts', import.meta.url))
    const child = spawn(
      process.execPath,
      [
        VITEST,
        'run',
        '--config',
        config,
        '--reporter=json',
        `--outputFile=${report}`,
        '-t',
        SELECTED.map(asPattern).join('|'),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, CI: '1' } },
    )
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve))
    // The lies fail cases, so the run exits 1; anything else is the harness breaking.
    expect(code, stderr).toBe(1)
    const parsed = JSON.parse(await readFile(report, 'utf8')) as {
      testResults: { assertionResults: CaseResult[] }[]
    }
    return parsed.testResults.flatMap((file) => file.assertionResults)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

describe('a dishonest backend fails the suite', () => {
  let cases: CaseResult[] = []
  beforeAll(async () => {
    cases = await runSuiteAgainstLies()
  }, 110_000)
  // The cases `-t` left out are reported as skipped; only the selected ones are checked.
  const selected = () =>
    cases.filter((entry) => {
      const name = [...entry.ancestorTitles, entry.title].join(' ')
      return SELECTED.some((title) => name.includes(title))
    })
  const casesOf = (lie: Lie) =>
    selected().filter((entry) => entry.ancestorTitles[0] === `cordon conformance: ${lie}`)

  it('no selected case is skipped, for any lie: each case asserts the half its declaration asks for', () => {
    expect(selected().length).toBeGreaterThan(LIES.length * 5)
    expect(
      selected()
        .filter((entry) => entry.status !== 'passed' && entry.status !== 'failed')
        .map((entry) => `${entry.ancestorTitles[0]} > ${entry.title}: ${entry.status}`),
    ).toEqual([])
  })

  it('the honest variant passes every case, among them each one a lie breaks', () => {
    const honest = casesOf('honest')
    expect(honest.length).toBeGreaterThan(5)
    expect(honest.filter((entry) => entry.status !== 'passed').map((entry) => entry.title)).toEqual(
      [],
    )
    for (const titles of Object.values(FAILS))
      for (const title of titles)
        expect(
          honest.some((entry) => entry.title.startsWith(title)),
          title,
        ).toBe(true)
  })

  for (const [lie, expected] of Object.entries(FAILS) as [Exclude<Lie, 'honest'>, string[]][]) {
    it(`${lie}: fails ${expected.join('; ')}, and nothing else`, () => {
      const failed = casesOf(lie)
        .filter((entry) => entry.status === 'failed')
        .map((entry) => entry.title)
      expect(failed).toHaveLength(expected.length)
      for (const title of expected)
        expect(
          failed.some((name) => name.startsWith(title)),
          `${title} failed among ${JSON.stringify(failed)}`,
        ).toBe(true)
    })
  }
})
