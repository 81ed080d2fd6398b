import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

/**
 * Runs a full garbage collection from inside a test without starting the
 * worker with `--expose-gc`: the flag is set at run time and `gc` taken
 * from a fresh context, where V8 installs it.
 */
export function collectGarbage(): void {
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  gc()
}
