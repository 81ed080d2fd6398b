import { execFileSync } from 'node:child_process'
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { publishablePackages } from './publishable-packages.js'

const root = fileURLToPath(new URL('../../..', import.meta.url))
const changesetBin = join(root, 'node_modules/@changesets/cli/bin.js')
const publishable = publishablePackages()
const names = publishable.map((entry) => entry.manifest.name).sort()

interface Release {
  readonly name: string
  readonly type: string
  readonly newVersion: string
}

/** `package.json` of every workspace package, relative to the root: `bench`, and one level under `packages` and `tooling`. */
function workspaceManifests(): string[] {
  const found: string[] = []
  for (const group of ['packages', 'tooling']) {
    if (!existsSync(join(root, group))) continue
    for (const name of readdirSync(join(root, group)).sort()) {
      const manifest = `${group}/${name}/package.json`
      if (existsSync(join(root, manifest))) found.push(manifest)
    }
  }
  if (existsSync(join(root, 'bench/package.json'))) found.push('bench/package.json')
  return found
}

/** A copy of the workspace's manifests and changesets, where `changeset version` may write. */
function scratchWorkspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'cordon-release-'))
  for (const entry of ['package.json', 'pnpm-workspace.yaml', '.changeset']) {
    cpSync(join(root, entry), join(dir, entry), { recursive: true })
  }
  // The workspace's manifests as they are on disk (pnpm-workspace.yaml's
  // globs), so a new package counts before it is committed or added.
  for (const manifest of workspaceManifests()) {
    cpSync(join(root, manifest), join(dir, manifest), { recursive: true })
  }
  // changeset status compares against the base branch, so the copy is a repository on it.
  const git = (...args: string[]) => execFileSync('git', args, { cwd: dir, stdio: 'ignore' })
  git('init', '-q', '-b', 'main')
  git('add', '-A')
  git(
    '-c',
    'user.name=release-check',
    '-c',
    'user.email=release-check@localhost',
    'commit',
    '-qm',
    'scratch',
  )
  return dir
}

function changeset(dir: string, ...args: string[]): string {
  return execFileSync(process.execPath, [changesetBin, ...args], { cwd: dir, encoding: 'utf8' })
}

function manifestOf(
  dir: string,
  name: string,
): Record<string, Record<string, string>> & {
  version: string
} {
  const entry = publishable.find((candidate) => candidate.manifest.name === name)!
  const relative = entry.dir.slice(root.length)
  return JSON.parse(readFileSync(join(dir, relative, 'package.json'), 'utf8'))
}

const scratch = scratchWorkspace()
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

describe('the release plan follows the versioning scheme (.changeset/README.md)', () => {
  it('releases every publishable package, and nothing private, at one version of 1.0.0 or later', () => {
    changeset(scratch, 'status', '--output=plan.json')
    const plan = JSON.parse(readFileSync(join(scratch, 'plan.json'), 'utf8')) as {
      releases: Release[]
    }
    const released = plan.releases.filter((release) => release.type !== 'none')
    expect(released.map((release) => release.name).sort()).toEqual(names)
    const versions = new Set(released.map((release) => release.newVersion))
    expect([...versions]).toHaveLength(1)
    const [version] = [...versions]
    expect(Number(version!.split('.')[0])).toBeGreaterThanOrEqual(1)
  })

  it('after that release, a minor change to core is a minor release of the whole group', () => {
    changeset(scratch, 'version')
    const first = manifestOf(scratch, '@cordon/core').version
    for (const name of names) expect(manifestOf(scratch, name).version).toBe(first)
    writeFileSync(
      join(scratch, '.changeset/core-minor.md'),
      '---\n"@cordon/core": minor\n---\n\nA new option.\n',
    )
    changeset(scratch, 'version')
    const [major, minor] = first.split('.').map(Number)
    const next = `${major}.${minor! + 1}.0`
    for (const name of names) {
      const manifest = manifestOf(scratch, name)
      expect(manifest.version, name).toBe(next)
      for (const section of ['dependencies', 'peerDependencies'] as const) {
        for (const [dependency, range] of Object.entries(manifest[section] ?? {})) {
          if (dependency.startsWith('@cordon/'))
            expect(range, `${name} ${dependency}`).toBe('workspace:^')
        }
      }
    }
  })
})
