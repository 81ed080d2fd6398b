#!/usr/bin/env bash
# Everything a fresh Debian machine needs before cordon runs: the pinned pnpm,
# the Docker Engine with gVisor and the local test images, the workspace's
# dependencies, and a build. Idempotent; CI and developers both use it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PNPM_VERSION="$(node -p 'require("./package.json").packageManager.split("@")[1]')"
if [[ "$(pnpm --version 2>/dev/null || true)" != "$PNPM_VERSION" ]]; then
  echo "bootstrap: installing pnpm $PNPM_VERSION" >&2
  npm install -g "pnpm@$PNPM_VERSION" >/dev/null 2>&1 || npm install -g "pnpm@$PNPM_VERSION"
fi

bash tooling/engine/setup.sh

pnpm install --frozen-lockfile
pnpm build
