#!/usr/bin/env bash
# Brings up the local Docker Engine the integration tests run against, and builds
# the test images without any container registry.
#
#   tooling/engine/setup.sh            run it (CI and developers)
#   source tooling/engine/setup.sh     same, and export the image names
#
# Idempotent: a second run with everything up takes well under a second.
# Needs root for the first run (apt, dockerd); later runs only need access to the
# engine. See tooling/engine/README.md for what it promises and the quirks found.

cordon_engine_setup() {
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

  local apt_packages=(docker.io busybox-static runsc iproute2 iptables openssl gcc libc6-dev docker-registry apache2-utils)
  local dockerd_log="${CORDON_DOCKERD_LOG:-/var/log/cordon-dockerd.log}"
  local daemon_json="${CORDON_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
  local ready_timeout="${CORDON_DOCKER_READY_TIMEOUT:-60}"

  umask 022

  _ce_say() { printf 'engine-setup: %s\n' "$*" >&2; }
  # Always runs in a process of its own (the script, or the subshell used when
  # sourced), so exiting is how a failure anywhere stops the whole setup.
  _ce_die() { printf 'engine-setup: error: %s\n' "$*" >&2; exit 1; }
  _ce_is_root() { [[ "$(id -u)" == 0 ]]; }

  # ---- 1. Debian packages -------------------------------------------------
  _ce_missing_packages() {
    local p status
    for p in "${apt_packages[@]}"; do
      status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)"
      [[ "$status" == ii* ]] || printf '%s\n' "$p"
    done
  }

  _ce_install_packages() {
    local missing
    if ! command -v dpkg-query >/dev/null; then
      _ce_say "not a Debian system: skipping package installation (needs docker, runsc, busybox-static)"
      return 0
    fi
    missing="$(_ce_missing_packages)"
    [[ -z "$missing" ]] && return 0
    # shellcheck disable=SC2086
    set -- $missing
    _ce_is_root || _ce_die "packages missing ($*); run this script as root once"
    command -v apt-get >/dev/null || _ce_die "apt-get not found; this script targets Debian 12"
    _ce_say "installing: $*"
    export DEBIAN_FRONTEND=noninteractive
    # Try the package lists already on disk first; refresh them only if that fails.
    if ! apt-get install -y --no-install-recommends "$@" >/tmp/cordon-apt.log 2>&1; then
      _ce_say "apt-get install failed with the current lists; running apt-get update"
      # Some configured sources may be unreachable here; apt still refreshes the rest.
      apt-get update >>/tmp/cordon-apt.log 2>&1 || _ce_say "apt-get update reported errors (continuing)"
      apt-get install -y --no-install-recommends "$@" >>/tmp/cordon-apt.log 2>&1 \
        || { tail -n 30 /tmp/cordon-apt.log >&2; _ce_die "apt-get install $* failed (log: /tmp/cordon-apt.log)"; }
    fi
    missing="$(_ce_missing_packages)"
    [[ -z "$missing" ]] || _ce_die "still missing after install: $missing"
  }

  # Merges the JSON object $1 into daemon.json, keeping every other key; an
  # object value (runtimes) is merged one level deep, so other runtimes stay.
  _ce_merge_daemon_json() {
    mkdir -p "$(dirname "$daemon_json")"
    node -e '
      const fs = require("fs");
      const file = process.argv[1];
      let cur = {};
      if (fs.existsSync(file)) {
        const text = fs.readFileSync(file, "utf8").trim();
        if (text) cur = JSON.parse(text);
      }
      for (const [key, value] of Object.entries(JSON.parse(process.argv[2]))) {
        const nested = value && typeof value === "object" && !Array.isArray(value);
        cur[key] = nested ? Object.assign({}, cur[key], value) : value;
      }
      fs.writeFileSync(file + ".tmp", JSON.stringify(cur, null, 2) + "\n");
      fs.renameSync(file + ".tmp", file);' "$daemon_json" "$1"
  }

  # ---- 2. runsc as a runtime of dockerd ------------------------------------
  # Returns 0 and prints "changed" when the file was written.
  _ce_configure_runtime() {
    local desired
    desired="$(cat "$here/daemon.runsc.json")"
    if [[ -f "$daemon_json" ]] && node -e '
        const fs = require("fs");
        const cur = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
        const want = JSON.parse(process.argv[2]);
        const ok = Object.keys(want.runtimes).every((name) =>
          JSON.stringify((cur.runtimes || {})[name]) === JSON.stringify(want.runtimes[name]));
        process.exit(ok ? 0 : 1);' "$daemon_json" "$desired" 2>/dev/null; then
      return 0
    fi
    _ce_is_root || _ce_die "$daemon_json lacks the runsc runtime; run this script as root once"
    _ce_merge_daemon_json "$desired" || _ce_die "could not merge the runsc runtime into $daemon_json"
    _ce_say "registered runsc in $daemon_json"
    echo changed
  }

  _ce_runtimes_live() {
    docker info -f '{{json .Runtimes}}' 2>/dev/null | node -e '
      const live = JSON.parse(require("fs").readFileSync(0, "utf8"));
      const want = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).runtimes;
      const same = (a, b) => a && a.path === b.path &&
        JSON.stringify(a.runtimeArgs || []) === JSON.stringify(b.runtimeArgs || []);
      process.exit(Object.keys(want).every((k) => same(live[k], want[k])) ? 0 : 1);' \
      "$here/daemon.runsc.json"
  }

  # ---- 2b. experimental mode (memory snapshots) -----------------------------
  # `docker checkpoint` and `docker start --checkpoint`, which a memory snapshot
  # is made of, exist only in the engine's experimental mode. Unlike runtimes it
  # is not reloadable: an engine already running without it must restart.
  _ce_configure_experimental() {
    if [[ -f "$daemon_json" ]] && node -e '
        const cur = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        process.exit(cur.experimental === true ? 0 : 1);' "$daemon_json" 2>/dev/null; then
      return 0
    fi
    _ce_is_root || { _ce_say "$daemon_json lacks \"experimental\": true and this is not root: memory snapshots will be refused"; return 0; }
    _ce_merge_daemon_json '{"experimental": true}' || _ce_die "could not set experimental mode in $daemon_json"
    _ce_say "turned on experimental mode in $daemon_json (memory snapshots)"
  }

  _ce_experimental_live() { [[ "$(docker version -f '{{.Server.Experimental}}' 2>/dev/null)" == true ]]; }

  # Restarting stops every container on the engine, so it happens only when
  # nothing but cordon's own runtime keepers runs (they are recreated on
  # demand), or when CORDON_ENGINE_RESTART=1 says the operator accepts it.
  _ce_restart_for_experimental() {
    _ce_experimental_live && return 0
    grep -q '"experimental": true' "$daemon_json" 2>/dev/null || return 0
    local others
    others="$(docker ps -q --filter status=running | while read -r id; do
      [[ "$(docker inspect -f '{{index .Config.Labels "cordon.runtime.part"}}' "$id" 2>/dev/null)" == keeper ]] || echo "$id"
    done)"
    if [[ -n "$others" && "${CORDON_ENGINE_RESTART:-0}" != 1 ]]; then
      _ce_say "dockerd runs without experimental mode and has running containers: memory snapshots are refused until it restarts (CORDON_ENGINE_RESTART=1 restarts it now)"
      return 0
    fi
    _ce_is_root || { _ce_say "dockerd runs without experimental mode; restarting it needs root (memory snapshots are refused until then)"; return 0; }
    local pid
    pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
    [[ -n "$pid" ]] || _ce_die "dockerd must restart for experimental mode but /var/run/docker.pid is missing"
    _ce_say "restarting dockerd (pid $pid) for experimental mode"
    kill -TERM "$pid" 2>/dev/null || _ce_die "could not stop dockerd (pid $pid)"
    local deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null; do
      ((SECONDS < deadline)) || _ce_die "dockerd (pid $pid) did not stop within 60 s"
      sleep 0.2
    done
    _ce_start_engine ""
    _ce_experimental_live || _ce_die "dockerd restarted but does not report experimental mode (check $daemon_json, $dockerd_log)"
  }

  # ---- 3. dockerd ------------------------------------------------------------
  _ce_engine_up() { docker info >/dev/null 2>&1; }

  _ce_start_engine() {
    local config_changed="$1"
    if _ce_engine_up; then
      if [[ "$config_changed" == changed ]]; then
        # "runtimes" is one of dockerd's reloadable options.
        local pid
        pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
        if [[ -z "$pid" ]] || ! kill -HUP "$pid" 2>/dev/null; then
          _ce_die "$daemon_json changed but dockerd could not be signalled to reload it"
        fi
        _ce_say "asked dockerd (pid $pid) to reload $daemon_json"
      fi
      return 0
    fi
    _ce_is_root || _ce_die "the Docker Engine is not answering and starting it needs root"
    command -v dockerd >/dev/null || _ce_die "dockerd not found after installing docker.io"
    # A stale pid file from a dead daemon makes dockerd refuse to start.
    local pid
    pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then rm -f /var/run/docker.pid; fi
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      _ce_say "dockerd (pid $pid) is running but not answering yet; waiting"
    else
      _ce_say "starting dockerd (log: $dockerd_log)"
      # No systemd here. dockerd starts and supervises its own containerd when no
      # system containerd socket answers. It must not inherit the set-up lock's
      # descriptor (fd 9): it outlives this script, and would hold the lock for
      # as long as it runs, so the next set-up would wait on it in vain.
      (cd / && exec setsid nohup dockerd >>"$dockerd_log" 2>&1 </dev/null 9>&-) &
      disown 2>/dev/null || true
      _ce_started=1
    fi
    local deadline=$((SECONDS + ready_timeout))
    until _ce_engine_up; do
      if ((SECONDS >= deadline)); then
        tail -n 20 "$dockerd_log" >&2 2>/dev/null || true
        _ce_die "dockerd did not answer 'docker info' within ${ready_timeout}s (log: $dockerd_log)"
      fi
      sleep 0.2
    done
  }

  # ---- 4. test images -------------------------------------------------------
  _ce_image_hash() { docker image inspect -f '{{index .Config.Labels "cordon.input-hash"}}' "$1" 2>/dev/null || true; }

  # Fingerprint of a file list: path, size, mtime (fast; no need to read 100 MB of node).
  _ce_fingerprint() { stat -L -c '%n %s %Y' "$@"; }

  _ce_busybox_bin() {
    local bb
    bb="$(command -v busybox || true)"
    [[ -n "$bb" ]] || _ce_die "busybox not found (package busybox-static)"
    bb="$(readlink -f "$bb")"
    # The image has no libc, so busybox must be the static build.
    if LC_ALL=C ldd "$bb" 2>&1 | grep -q '=>'; then
      _ce_die "$bb is dynamically linked; install busybox-static"
    fi
    printf '%s\n' "$bb"
  }

  # Files node needs: the binary, its libraries and the dynamic loader, one per line.
  _ce_node_files() {
    local node="$1"
    LC_ALL=C ldd "$node" | awk '
      $2 == "=>" && $3 ~ /^\// { print $3; next }
      $1 ~ /^\// { print $1 }'
  }

  # Writes the busybox root filesystem into directory $1 (created mode 755: a
  # non-root user cannot exec anything under a 700 root, "sh: not found").
  _ce_stage_busybox() {
    local root="$1" bb="$2" applet
    mkdir -p "$root"
    chmod 755 "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,dev,proc,sys,run,var,root,home/sandbox,tmp,var/tmp}
    cp "$bb" "$root/bin/busybox"
    chmod 755 "$root/bin/busybox"
    for applet in $("$bb" --list); do
      [[ "$applet" == busybox ]] && continue
      ln -sf busybox "$root/bin/$applet"
    done
    # Canonical locations too (e.g. /usr/bin/env for "#!/usr/bin/env node").
    for applet in $("$bb" --list-full); do
      [[ "$applet" == linuxrc || -e "$root/$applet" || -L "$root/$applet" ]] && continue
      ln -s /bin/busybox "$root/$applet"
    done
    chmod 700 "$root/root"
    chmod 1777 "$root/tmp" "$root/var/tmp"
    cp "$here/images/rootfs/etc/passwd" "$here/images/rootfs/etc/group" \
       "$here/images/rootfs/etc/nsswitch.conf" "$root/etc/"
    chmod 644 "$root"/etc/{passwd,group,nsswitch.conf}
    # Mount targets the engine bind-mounts over; present so a read-only rootfs is fine.
    : >"$root/etc/hosts"; : >"$root/etc/hostname"; : >"$root/etc/resolv.conf"
  }

  # Adds node ($2) as /usr/bin/node to the root filesystem $1, with its libraries
  # and the dynamic loader (${@:3}) at the paths ldd reports, dereferenced.
  _ce_add_node() {
    local root="$1" node="$2" f
    shift 2
    for f in "$@"; do
      mkdir -p "$root$(dirname "$f")"
      cp -L "$f" "$root$f"
    done
    cp -L "$node" "$root/usr/bin/node"
    chmod 755 "$root/usr/bin/node"
    # CA certificates for HTTPS (node also has its own bundle); links dereferenced.
    if [[ -d /etc/ssl/certs ]]; then
      mkdir -p "$root/etc/ssl"
      cp -rL /etc/ssl/certs "$root/etc/ssl/certs" 2>/dev/null || true
    fi
  }

  # Tars directory $1 to file $2 with numeric owners: everything root except the
  # sandbox home, which belongs to 1000:1000. Works without root on the host.
  _ce_tar_rootfs() {
    local root="$1" out="$2"
    tar --numeric-owner --owner=0 --group=0 -C "$root" -cf "$out" --exclude=./home/sandbox .
    tar --numeric-owner --owner=1000 --group=1000 -C "$root" -rf "$out" ./home/sandbox
  }

  _ce_import() {
    local tarfile="$1" ref="$2" hash="$3" old
    old="$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)"
    docker import \
      --change 'USER 1000:1000' \
      --change 'WORKDIR /home/sandbox' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV HOME=/home/sandbox' \
      --change 'CMD ["/bin/sh"]' \
      --change 'LABEL cordon.test-image=1' \
      --change "LABEL cordon.input-hash=$hash" \
      "$tarfile" "$ref" >/dev/null || _ce_die "docker import of $ref failed"
    # Drop the superseded image unless a container still uses it.
    [[ -z "$old" ]] || docker image rm "$old" >/dev/null 2>&1 || true
  }

  _ce_build_images() {
    local bb node script_fp bb_hash node_hash
    bb="$(_ce_busybox_bin)"
    node="$(command -v node || true)"
    [[ -n "$node" ]] || _ce_die "node not found on the host; cordon-test/node is built from it"
    node="$(readlink -f "$node")"

    # Inputs: the code that lays out and imports the images, the files copied into
    # them, and (by path, size and mtime) the host binaries.
    script_fp="$( { declare -f _ce_stage_busybox _ce_tar_rootfs _ce_import _ce_node_files _ce_add_node
      cat "$here"/images/rootfs/etc/*; } | sha256sum | cut -c1-64)"
    bb_hash="$( { echo "$script_fp"; _ce_fingerprint "$bb"; } | sha256sum | cut -c1-16)"

    local -a node_libs
    mapfile -t node_libs < <(_ce_node_files "$node")
    ((${#node_libs[@]} > 0)) || _ce_die "ldd listed no libraries for $node"
    local -a ssl=()
    [[ -d /etc/ssl/certs ]] && ssl=(/etc/ssl/certs)
    node_hash="$( { echo "$bb_hash"; _ce_fingerprint "$node" "${node_libs[@]}" "${ssl[@]}"; } | sha256sum | cut -c1-16)"

    local need_bb=0 need_node=0
    [[ "$(_ce_image_hash cordon-test/busybox:latest)" == "$bb_hash" ]] || need_bb=1
    [[ "$(_ce_image_hash cordon-test/node:latest)" == "$node_hash" ]] || need_node=1
    ((need_bb || need_node)) || return 0

    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/cordon-images.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT

    _ce_stage_busybox "$work/rootfs" "$bb"
    if ((need_bb)); then
      _ce_say "building cordon-test/busybox:latest ($bb_hash)"
      _ce_tar_rootfs "$work/rootfs" "$work/busybox.tar"
      _ce_import "$work/busybox.tar" cordon-test/busybox:latest "$bb_hash"
    fi
    if ((need_node)); then
      _ce_say "building cordon-test/node:latest ($node_hash)"
      _ce_add_node "$work/rootfs" "$node" "${node_libs[@]}"
      _ce_tar_rootfs "$work/rootfs" "$work/node.tar"
      _ce_import "$work/node.tar" cordon-test/node:latest "$node_hash"
    fi
  }

  # ---- 5. summary -----------------------------------------------------------
  _ce_summary() {
    local version runtimes
    version="$(docker version -f 'engine {{.Server.Version}}, API {{.Server.APIVersion}}, experimental {{.Server.Experimental}}' 2>/dev/null || echo unknown)"
    runtimes="$(docker info -f '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null || echo unknown)"
    _ce_say "ready: $version; runtimes: $runtimes(default $(docker info -f '{{.DefaultRuntime}}' 2>/dev/null))"
    docker image ls --filter label=cordon.test-image=1 --filter dangling=false \
      --format 'engine-setup: image {{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' >&2
  }

  _ce_main() {
    local changed _ce_started=0 lock="${TMPDIR:-/tmp}/cordon-engine-setup.lock"
    # Parallel CI jobs may run this at once: one at a time starts dockerd and builds.
    if command -v flock >/dev/null; then
      { exec 9>>"$lock"; } 2>/dev/null || { exec 9<"$lock"; } 2>/dev/null || true
      if { true >&9; } 2>/dev/null; then
        chmod 666 "$lock" 2>/dev/null || true
        flock -w 300 9 || _ce_die "timed out waiting for $lock"
      fi
    fi
    _ce_install_packages
    command -v node >/dev/null || _ce_die "node is required (JSON merge and the node test image)"
    if _ce_engine_up && _ce_runtimes_live; then
      changed=""
    else
      changed="$(_ce_configure_runtime)"
    fi
    _ce_configure_experimental
    _ce_start_engine "$changed"
    # A reload is asynchronous: wait until the engine reports the runtimes we want.
    local deadline=$((SECONDS + 10))
    until _ce_runtimes_live; do
      ((SECONDS < deadline)) || _ce_die "dockerd does not report the runtimes of $here/daemon.runsc.json (check $daemon_json, $dockerd_log)"
      sleep 0.1
    done
    _ce_restart_for_experimental
    _ce_build_images
    # After a (re)start or reconfiguration, prove both runtimes can run a container.
    if [[ -n "$changed" || "${_ce_started:-0}" == 1 ]]; then
      local rt
      for rt in runc runsc; do
        docker run --rm --runtime="$rt" --network=none cordon-test/busybox:latest true \
          || _ce_die "the $rt runtime cannot run cordon-test/busybox (log: $dockerd_log)"
      done
    fi
    [[ "${CORDON_ENGINE_QUIET:-0}" == 1 ]] || _ce_summary
  }

  _ce_main
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  shopt -s inherit_errexit
  cordon_engine_setup "$@"
else
  # Sourced: run in a subshell so strict mode and failures do not leak into the
  # caller's shell, then export what tests read.
  ( set -euo pipefail; shopt -s inherit_errexit; cordon_engine_setup "$@" ) || return $?
  export CORDON_TEST_IMAGE_BUSYBOX=cordon-test/busybox:latest
  export CORDON_TEST_IMAGE_NODE=cordon-test/node:latest
fi
