import { describe, expect, it } from 'vitest'
import {
  type ContainerSandboxLayout,
  resolveLayout,
  SANDBOX_DEFAULT_OUTPUTS_PATH,
  SANDBOX_DEFAULT_SCRATCH_PATH,
  SANDBOX_DEFAULT_SKILLS_PARENT,
  SANDBOX_DEFAULT_TOOL_RESULTS_PATH,
  SANDBOX_DEFAULT_TRANSCRIPTS_PATH,
  SANDBOX_DEFAULT_UPLOADS_PATH,
  SandboxLayoutValidationError,
} from '../src/index.js'

const host = (path: string) => ({ kind: 'hostDir' as const, path })

describe('resolveLayout', () => {
  it('uses the default paths and modes for every role', () => {
    const resolved = resolveLayout({
      outputs: { source: host('/data/out') },
      uploads: { source: host('/data/up') },
      toolResults: { source: host('/data/tools') },
      transcripts: { source: host('/data/tx') },
      scratch: { source: { kind: 'ephemeral' } },
      skills: [{ id: 'pdf-tools', source: host('/skills/pdf') }],
    })
    expect(resolved.outputsPath).toBe(SANDBOX_DEFAULT_OUTPUTS_PATH)
    expect(
      resolved.mounts.map((mount) => [mount.role, mount.containerPath, mount.readOnly]),
    ).toEqual([
      ['outputs', SANDBOX_DEFAULT_OUTPUTS_PATH, false],
      ['uploads', SANDBOX_DEFAULT_UPLOADS_PATH, true],
      ['toolResults', SANDBOX_DEFAULT_TOOL_RESULTS_PATH, true],
      ['transcripts', SANDBOX_DEFAULT_TRANSCRIPTS_PATH, true],
      ['scratch', SANDBOX_DEFAULT_SCRATCH_PATH, false],
      ['skill', `${SANDBOX_DEFAULT_SKILLS_PARENT}/pdf-tools`, true],
    ])
    expect(resolved.writableRoots).toEqual([
      SANDBOX_DEFAULT_OUTPUTS_PATH,
      SANDBOX_DEFAULT_SCRATCH_PATH,
    ])
    expect(resolved.readableRoots).toHaveLength(6)
  })

  it('honours custom paths and normalizes them', () => {
    const resolved = resolveLayout({
      outputs: { source: { kind: 'ephemeral' }, path: '/work//out/' },
    })
    expect(resolved.outputsPath).toBe('/work/out')
  })

  it('reports every problem at once', () => {
    const layout: ContainerSandboxLayout = {
      outputs: { source: host('relative/dir'), path: '/mnt/../etc' },
      uploads: { source: host('/a'), path: '/mnt/shared' },
      scratch: { source: host('/b/../c'), path: '/mnt/shared' },
      skills: [
        { id: 'Bad Id', source: host('/s1') },
        { id: 'dup', source: host('/s2') },
        { id: 'dup', source: host('/s3') },
        { id: '../escape', source: host('/s4') },
      ],
    }
    let caught: unknown
    try {
      resolveLayout(layout)
    } catch (error) {
      caught = error
    }
    expect(SandboxLayoutValidationError.isInstance(caught)).toBe(true)
    const issues = (caught as SandboxLayoutValidationError).issues
    const text = issues.map((issue) => `${issue.path}: ${issue.message}`).join('\n')
    expect(text).toContain('outputs.path: "/mnt/../etc" must not contain ".."')
    expect(text).toContain(
      'outputs.source.path: host directory "relative/dir" must be an absolute path',
    )
    expect(text).toContain('scratch.source.path: host directory "/b/../c" must not contain ".."')
    expect(text).toContain('skill id "Bad Id"')
    expect(text).toContain('skill id "../escape"')
    expect(text).toContain('duplicate skill id "dup"')
    expect(text).toContain('scratch and uploads are both mounted at /mnt/shared')
    expect(issues.length).toBeGreaterThanOrEqual(7)
  })

  it('requires outputs and rejects malformed sources with a layout error', () => {
    expect(() => resolveLayout({} as ContainerSandboxLayout)).toThrow(SandboxLayoutValidationError)
    expect(() =>
      resolveLayout({ outputs: { source: { kind: 'nfs' } } } as unknown as ContainerSandboxLayout),
    ).toThrow(SandboxLayoutValidationError)
  })

  it('refuses a mount over the root directory', () => {
    expect(() => resolveLayout({ outputs: { source: { kind: 'ephemeral' }, path: '/' } })).toThrow(
      /root directory/,
    )
  })
})
