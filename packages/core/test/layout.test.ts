import { describe, expect, it } from 'vitest'
import { planLayoutMounts, readableRoots, writableRoots } from '../src/backend-kit.js'
import {
  type ContainerSandboxLayout,
  ContainerSandboxLayoutValidationError,
  resolveLayout,
  SANDBOX_DEFAULT_OUTPUTS_PATH,
  SANDBOX_DEFAULT_SCRATCH_PATH,
  SANDBOX_DEFAULT_SKILLS_PARENT,
  SANDBOX_DEFAULT_TOOL_RESULTS_PATH,
  SANDBOX_DEFAULT_TRANSCRIPTS_PATH,
  SANDBOX_DEFAULT_UPLOADS_PATH,
} from '../src/index.js'

const host = (hostPath: string) => ({ type: 'hostDir' as const, hostPath })

function layoutError(layout: unknown): ContainerSandboxLayoutValidationError {
  try {
    resolveLayout(layout as ContainerSandboxLayout)
  } catch (error) {
    if (ContainerSandboxLayoutValidationError.isInstance(error)) return error
    throw error
  }
  throw new Error('expected a layout error')
}

describe('resolveLayout', () => {
  it("fills the reference's default paths, and keeps the reference's resolved shape", () => {
    const resolved = resolveLayout({
      outputs: { source: host('/data/out') },
      uploads: { source: host('/data/up') },
      toolResults: { source: host('/data/tools') },
      transcripts: { source: host('/data/tx') },
      scratch: { source: { type: 'ephemeral' } },
      skills: [{ id: 'pdf-tools', source: host('/skills/pdf') }],
    })
    expect(resolved).toEqual({
      outputs: { source: host('/data/out'), containerPath: SANDBOX_DEFAULT_OUTPUTS_PATH },
      uploads: { source: host('/data/up'), containerPath: SANDBOX_DEFAULT_UPLOADS_PATH },
      toolResults: {
        source: host('/data/tools'),
        containerPath: SANDBOX_DEFAULT_TOOL_RESULTS_PATH,
      },
      transcripts: { source: host('/data/tx'), containerPath: SANDBOX_DEFAULT_TRANSCRIPTS_PATH },
      scratch: { source: { type: 'ephemeral' }, containerPath: '/mnt/user-data/scratch' },
      skills: [
        {
          id: 'pdf-tools',
          source: host('/skills/pdf'),
          containerPath: `${SANDBOX_DEFAULT_SKILLS_PARENT}/pdf-tools`,
        },
      ],
    })
    expect(SANDBOX_DEFAULT_SCRATCH_PATH).toBe('/mnt/user-data/scratch')
    expect(
      planLayoutMounts(resolved).map((mount) => [mount.role, mount.containerPath, mount.readOnly]),
    ).toEqual([
      ['outputs', SANDBOX_DEFAULT_OUTPUTS_PATH, false],
      ['uploads', SANDBOX_DEFAULT_UPLOADS_PATH, true],
      ['scratch', SANDBOX_DEFAULT_SCRATCH_PATH, false],
      ['toolResults', SANDBOX_DEFAULT_TOOL_RESULTS_PATH, true],
      ['transcripts', SANDBOX_DEFAULT_TRANSCRIPTS_PATH, true],
      ['skill', `${SANDBOX_DEFAULT_SKILLS_PARENT}/pdf-tools`, true],
    ])
    expect(writableRoots(resolved)).toEqual([
      SANDBOX_DEFAULT_OUTPUTS_PATH,
      SANDBOX_DEFAULT_SCRATCH_PATH,
    ])
    expect(readableRoots(resolved)).toHaveLength(6)
  })

  it('honours custom container paths (skills too) and normalizes them', () => {
    const resolved = resolveLayout({
      outputs: { source: { type: 'ephemeral' }, containerPath: '/work//out/' },
      skills: [
        { id: 'pdf-tools.v2', source: { type: 'inImage' }, containerPath: '/opt/skills/pdf' },
      ],
    })
    expect(resolved.outputs.containerPath).toBe('/work/out')
    expect(resolved.skills?.[0]).toEqual({
      id: 'pdf-tools.v2',
      source: { type: 'inImage' },
      containerPath: '/opt/skills/pdf',
    })
  })

  it('keeps noexec where a mount sets it, and plans every other mount as executable', () => {
    const resolved = resolveLayout({
      outputs: { source: { type: 'ephemeral' }, noexec: true },
      scratch: { source: { type: 'ephemeral' }, noexec: false },
      uploads: { source: host('/data/up') },
      skills: [{ id: 'pdf', source: host('/skills/pdf'), noexec: true }],
    })
    expect(resolved.outputs).toEqual({
      source: { type: 'ephemeral' },
      containerPath: SANDBOX_DEFAULT_OUTPUTS_PATH,
      noexec: true,
    })
    expect(resolved.uploads).not.toHaveProperty('noexec')
    expect(planLayoutMounts(resolved).map((mount) => [mount.role, mount.noexec])).toEqual([
      ['outputs', true],
      ['uploads', false],
      ['scratch', false],
      ['skill', true],
    ])
    expect(layoutError({ outputs: { source: host('/o'), noexec: 'yes' } }).reasons[0]).toContain(
      'outputs.noexec',
    )
  })

  it("accepts the reference's skill ids with dots and capitals, never . or ..", () => {
    for (const id of ['pdf-tools.v2', 'Data_Analysis', 'a', '1.0']) {
      expect(
        resolveLayout({ outputs: { source: host('/o') }, skills: [{ id, source: host('/s') }] })
          .skills?.[0]?.containerPath,
      ).toBe(`/mnt/skills/${id}`)
    }
    for (const id of ['.', '..', '.hidden', 'a/b', 'a b', '', 'foo..bar', '..foo', 'foo..']) {
      expect(
        layoutError({ outputs: { source: host('/o') }, skills: [{ id, source: host('/s') }] })
          .reasons[0],
      ).toContain(`skill id "${id}"`)
    }
  })

  it('reports every problem at once, as reasons and as issues', () => {
    const error = layoutError({
      outputs: { source: host('relative/dir'), containerPath: '/mnt/../etc' },
      uploads: { source: host('/a'), containerPath: '/mnt/shared' },
      scratch: { source: host('/b/../c'), containerPath: '/mnt/shared' },
      skills: [
        { id: 'Bad Id', source: host('/s1') },
        { id: 'dup', source: host('/s2') },
        { id: 'dup', source: host('/s3') },
        { id: '../escape', source: host('/s4') },
      ],
    })
    const text = error.reasons.join('\n')
    expect(text).toContain('outputs.containerPath: "/mnt/../etc" must not contain ".."')
    expect(text).toContain(
      'outputs.source.hostPath: host directory "relative/dir" must be an absolute path',
    )
    expect(text).toContain(
      'scratch.source.hostPath: host directory "/b/../c" must not contain ".."',
    )
    expect(text).toContain('skill id "Bad Id"')
    expect(text).toContain('skill id "../escape"')
    expect(text).toContain('duplicate skill id "dup"')
    expect(text).toContain('scratch and uploads are both mounted at "/mnt/shared"')
    expect(error.reasons.length).toBeGreaterThanOrEqual(7)
    expect(error.issues).toHaveLength(error.reasons.length)
    expect(error.message).toBe(`Invalid ContainerSandboxLayout: ${error.reasons.join('; ')}`)
    expect(error.code).toBe('LAYOUT_INVALID')
  })

  it('finds a missing outputs, a malformed skill id and a duplicate skill id in one pass', () => {
    const error = layoutError({
      skills: [
        { id: 'pdf-tools', source: host('/s1') },
        { id: 'foo..bar', source: host('/s2') },
        { id: 'pdf-tools', source: host('/s3') },
      ],
    })
    expect(error.reasons).toEqual([
      "outputs: missing: a layout needs the writable outputs mount, the sandbox's rootDir",
      'skills.1.id: skill id "foo..bar" must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit, with no ".."',
      'skills.2.id: duplicate skill id "pdf-tools"',
    ])
    // A malformed part is reported, and the rest is still checked.
    const mixed = layoutError({
      outputs: { source: { type: 'nfs' } },
      skills: [{ id: 'a', source: host('/s') }, { id: 'a', source: host('/t') }, { id: 7 }],
    })
    expect(mixed.reasons.some((reason) => reason.startsWith('outputs.source'))).toBe(true)
    expect(mixed.reasons).toContain('skills.1.id: duplicate skill id "a"')
    expect(mixed.reasons.some((reason) => reason.startsWith('skills.2'))).toBe(true)
  })

  it('quotes ids and paths as JSON, a shared containerPath included', () => {
    const error = layoutError({
      outputs: { source: host('/o'), containerPath: '/work' },
      scratch: { source: { type: 'ephemeral' }, containerPath: '/work' },
      skills: [{ id: 'say "hi"', source: host('/s') }],
    })
    expect(error.reasons).toContain('scratch: scratch and outputs are both mounted at "/work"')
    expect(error.reasons.join('\n')).toContain('skill id "say \\"hi\\""')
  })

  it('resolves an empty skills list as no skills', () => {
    const resolved = resolveLayout({ outputs: { source: host('/o') }, skills: [] })
    expect(resolved.skills).toBeUndefined()
    expect('skills' in resolved).toBe(false)
  })

  it('refuses a missing outputs mount, unknown source types and unknown keys', () => {
    expect(layoutError({}).reasons.join()).toContain('outputs')
    expect(layoutError({ outputs: { source: { type: 'nfs' } } }).reasons.join()).toContain(
      'outputs.source',
    )
    expect(layoutError({ outputs: { source: host('/o'), path: '/x' } }).reasons.join()).toContain(
      'path',
    )
    expect(
      layoutError({ outputs: { source: { kind: 'hostDir', path: '/o' } } }).reasons.length,
    ).toBeGreaterThan(0)
  })

  it('accepts a cap on a writable host directory and refuses one on a read-only mount', () => {
    const capped = { type: 'hostDir' as const, hostPath: '/o', sizeMb: 64 }
    expect(resolveLayout({ outputs: { source: capped } }).outputs.source).toEqual(capped)
    expect(
      resolveLayout({ outputs: { source: host('/o') }, scratch: { source: capped } }).scratch,
    ).toBeDefined()
    const readOnly = layoutError({
      outputs: { source: host('/o') },
      uploads: { source: { ...capped, hostPath: '/u' } },
      skills: [{ id: 'tools', source: { ...capped, hostPath: '/s' } }],
    })
    expect(readOnly.reasons.join('\n')).toMatch(/uploads\.source\.sizeMb.*read-only/)
    expect(readOnly.reasons.join('\n')).toMatch(/skills\.0\.source\.sizeMb.*read-only/)
    expect(layoutError({ outputs: { source: { ...capped, sizeMb: 0 } } }).reasons.join()).toContain(
      'sizeMb',
    )
  })

  it('refuses a mount over the root directory', () => {
    expect(() =>
      resolveLayout({ outputs: { source: { type: 'ephemeral' }, containerPath: '/' } }),
    ).toThrow(/root directory/)
  })
})

describe('host trees and container paths a layout may not use', () => {
  it.each([
    '/proc',
    '/proc/1',
    '/sys/fs/cgroup',
    '/dev',
    '/dev/shm',
    '/run',
    '/var/run/',
    '/var/lib/docker/volumes',
    '/etc',
    '/boot',
    '//proc/./self',
    '/var',
    '/',
  ])('refuses host directory %j in any role, naming its key', (hostPath) => {
    const outputs = layoutError({ outputs: { source: host(hostPath) } })
    expect(outputs.issues.map((issue) => issue.path)).toContain('outputs.source.hostPath')
    expect(outputs.reasons.join('\n')).toContain(`would expose the host's`)
    const skill = layoutError({
      outputs: { source: host('/data/out') },
      skills: [{ id: 'tools', source: host(hostPath) }],
    })
    expect(skill.issues.map((issue) => issue.path)).toContain('skills.0.source.hostPath')
  })

  it('takes host directories that only share a prefix with a refused tree', () => {
    for (const hostPath of [
      '/procedures',
      '/device-data',
      '/system',
      '/var/lib/dockerish',
      '/tmp/proc',
    ])
      expect(resolveLayout({ outputs: { source: host(hostPath) } }).outputs.source).toEqual(
        host(hostPath),
      )
  })

  it('refuses a NUL in a host directory or a container path', () => {
    const error = layoutError({
      outputs: { source: host('/data/out\0x') },
      scratch: { source: host('/data/scratch'), containerPath: '/mnt/scr\0atch' },
    })
    expect(error.issues).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          path: 'outputs.source.hostPath',
          message: expect.stringContaining('NUL'),
        }),
        expect.objectContaining({
          path: 'scratch.containerPath',
          message: expect.stringContaining('NUL'),
        }),
      ]),
    )
  })

  it.each([
    '/proc',
    '/proc/sys',
    '/dev',
    '/dev/shm',
    '/sys',
    '/sys/kernel',
    '/.cordon',
    '/.cordon/bin',
    '/.cordon-node',
    '/.cordon-snapshot',
    '/run/cordon-agent',
  ])('refuses container path %j, naming its key', (containerPath) => {
    const error = layoutError({
      outputs: { source: host('/data/out') },
      scratch: { source: { type: 'ephemeral' }, containerPath },
    })
    expect(error.issues).toEqual([
      expect.objectContaining({
        path: 'scratch.containerPath',
        message: expect.stringContaining('reserved'),
      }),
    ])
  })

  it('takes container paths that only share a prefix with a reserved one', () => {
    const resolved = resolveLayout({
      outputs: { source: host('/data/out'), containerPath: '/devices' },
      scratch: { source: { type: 'ephemeral' }, containerPath: '/run/cordon-agents' },
    })
    expect(resolved.outputs.containerPath).toBe('/devices')
  })
})
