#!/bin/sh
# cordon-aci-entrypoint.sh: the command of the container in a cordon sandbox's
# ACI container group profile (see the README of @cordon/backend-aci).
#
# A standby pool starts its container groups before anyone claims them, so a
# warm container cannot know its agent secret yet. A claim may change only the
# container's config map, which ACI mounts at /mnt/configmap/<container>/<key>
# and updates without a restart; the backend puts a fresh secret there. This
# script waits for it, then runs the agent, which reads it from that file.
#
# It also stands in for the init process ACI does not give a container: it
# is PID 1, so it forwards SIGTERM/SIGINT to the agent and reaps every orphan
# a command leaves behind (zombies would count against the process limit).
#
# Environment (set in the profile):
#   CORDON_ACI_SECRET_FILE  required: /mnt/configmap/<container>/cordon-agent-secret
#   CORDON_MAX_PROCESSES    processes and threads the sandbox's user may have
#                           (ulimit -u; the agent's own threads count too)
#   CORDON_AGENT_PROGRAM    the agent (default /opt/cordon/cordon-agent.mjs)
#   CORDON_AGENT_*          passed to the agent as they are
set -eu

secret_file="${CORDON_ACI_SECRET_FILE:?set CORDON_ACI_SECRET_FILE to /mnt/configmap/<container>/cordon-agent-secret}"
agent="${CORDON_AGENT_PROGRAM:-/opt/cordon/cordon-agent.mjs}"

if [ -n "${CORDON_MAX_PROCESSES:-}" ]; then
  # Sets the hard limit too, so nothing in the sandbox can raise it again.
  ulimit -u "$CORDON_MAX_PROCESSES"
fi

# The secret arrives with the claim; until then the agent must not start, as
# it never runs without a secret.
while [ ! -s "$secret_file" ]; do sleep 0.1; done

export CORDON_AGENT_SECRET_FILE="$secret_file"
# A detached sandbox's claim also sets its lifetime (config-map key
# cordon-agent-lifetime-ms, applied with the secret): the agent ends itself
# then, whether or not any host is left to destroy the group. The agent
# reports it in its health answer, and the backend refuses a detached create
# whose agent does not.
lifetime_file="${secret_file%/*}/cordon-agent-lifetime-ms"
if [ -s "$lifetime_file" ]; then
  CORDON_AGENT_LIFETIME_MS="$(cat "$lifetime_file")"
  export CORDON_AGENT_LIFETIME_MS
fi
unset CORDON_ACI_SECRET_FILE CORDON_MAX_PROCESSES CORDON_AGENT_PROGRAM

node "$agent" &
agent_pid=$!
trap 'kill -TERM "$agent_pid" 2>/dev/null || true' TERM INT

# `wait` returns whenever a trapped signal arrives and reaps any child, orphans
# included; leave only once the agent itself is gone, with its status.
while :; do
  status=0
  wait "$agent_pid" || status=$?
  if ! kill -0 "$agent_pid" 2>/dev/null; then exit "$status"; fi
done
