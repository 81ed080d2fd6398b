/**
 * The tsconfig of a stranger's project that takes cordon's packages: strict,
 * every library's types checked (no skipLibCheck), and nothing newer than
 * ES2022 in `lib` unless a test names more. Compiles `files` into `out/`.
 */
export function strangerTsconfig(
  files: readonly string[],
  lib: readonly string[] = ['ES2022'],
): { compilerOptions: Record<string, unknown>; files: readonly string[] } {
  return {
    compilerOptions: {
      target: 'ES2022',
      lib,
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      types: ['node'],
      strict: true,
      skipLibCheck: false,
      noEmitOnError: true,
      outDir: 'out',
    },
    files,
  }
}
