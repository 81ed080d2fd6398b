#!/usr/bin/env bash
# The README's quick start. On a fresh Debian machine, as root:
#   bash tooling/quickstart.sh demo   set everything up, then run cordon's main job
#   bash tooling/quickstart.sh test   set everything up, then run the whole test suite
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode="${1:-demo}"
bash tooling/bootstrap.sh >&2
case "$mode" in
  demo) exec node packages/sandbox/dist/cli/main.js demo "${@:2}" ;;
  test) exec pnpm test ;;
  *) echo "usage: bash tooling/quickstart.sh demo|test" >&2; exit 64 ;;
esac
