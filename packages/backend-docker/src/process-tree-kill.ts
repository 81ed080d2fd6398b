import type Docker from 'dockerode'

/** Every exec carries this variable, so its processes can be found again. */
export const EXEC_TAG_VARIABLE = 'CORDON_EXEC_ID'

/**
 * Runs inside the sandbox (POSIX sh, tr, grep, kill and /proc) to kill every
 * process of one exec: those whose environment carries the exec's tag (which
 * survives `setsid` and double forks, because children inherit it) and every
 * descendant of those by parent pid (which catches a child that scrubbed its
 * environment while its parent lives). Each round stops the whole set before
 * killing it, so a fork loop cannot outrun the kill; rounds repeat until
 * nothing is left. The Engine API has no way to signal an exec, and signalling
 * only the direct child would leave grandchildren running.
 */
const KILL_SCRIPT = `
tag="${EXEC_TAG_VARIABLE}=$1"
self=$$
round=0
while [ $round -lt 8 ]; do
  pids=" "
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    [ "$p" = "$self" ] && continue
    if tr '\\000' '\\n' < "$d/environ" 2>/dev/null | grep -qxF "$tag"; then pids="$pids$p "; fi
  done
  changed=1
  while [ $changed = 1 ]; do
    changed=0
    for d in /proc/[0-9]*; do
      p=\${d#/proc/}
      case "$pids" in *" $p "*) continue ;; esac
      stat=$(cat "$d/stat" 2>/dev/null) || continue
      rest=\${stat##*) }
      set -- $rest
      case "$pids" in *" $2 "*) pids="$pids$p "; changed=1 ;; esac
    done
  done
  [ "$pids" = " " ] && exit 0
  kill -STOP $pids 2>/dev/null
  kill -KILL $pids 2>/dev/null
  round=$((round + 1))
done
exit 0
`

/** Kills the process tree of the exec tagged `tag` and waits for the killer to finish. */
export async function killExecTree(
  container: Docker.Container,
  user: string,
  tag: string,
): Promise<void> {
  const killer = await container.exec({
    Cmd: ['sh', '-c', KILL_SCRIPT, 'cordon-kill', tag],
    User: user,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  })
  const stream = await killer.start({ hijack: true, stdin: false })
  await new Promise<void>((resolve) => {
    stream.on('end', resolve)
    stream.on('close', resolve)
    stream.on('error', () => resolve())
    stream.resume()
  })
}
