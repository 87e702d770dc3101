#!/usr/bin/env bash
# Which image `make run` gives the stack's front door (kit/deploy/door.py reads VLLM_KIT_DOOR_IMAGE; empty: the
# pinned official image, kit/data/door.yaml). Prints nothing when the pinned image is here or can be pulled. On a
# machine with no registry (the kit's own build and test machines) it builds the stand-in the integration tests use,
# Debian's haproxy package on the local base (tests/integration/standins/haproxy/; the .debs come from
# scripts/setup-host.sh's haproxy step), and prints its tag. Usage: scripts/door-image.sh PYTHON BASE_IMAGE
set -euo pipefail
python=${1:?python}; base=${2:?base image}
root=$(cd "$(dirname "$0")/.." && pwd)
pinned=$("$python" -c 'from kit.core.datafiles import load_yaml; i = load_yaml("door.yaml")["image"]; print("{repository}:{tag}@{digest}".format(**i))')
if docker image inspect "$pinned" >/dev/null 2>&1 || docker pull -q "$pinned" >/dev/null 2>&1; then
    exit 0
fi
debs="${KIT_CACHE_DIR:-$HOME/.cache/vllm-kit}/debs/haproxy"
if ! compgen -G "$debs/haproxy_*.deb" >/dev/null; then
    echo "door-image: $pinned cannot be pulled and no haproxy .deb is in $debs (run scripts/setup-host.sh)" >&2
    exit 1
fi
tag=vllm-kit/standin-haproxy:local
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$root/tests/integration/standins/haproxy/Dockerfile" "$context/Dockerfile"
mkdir "$context/debs" && cp "$debs"/*.deb "$context/debs/"
echo "door-image: $pinned cannot be pulled here; the door runs $tag (Debian's haproxy on $base)" >&2
docker build -q --build-arg "BASE_IMAGE=$base" -t "$tag" "$context" >/dev/null 2>"$context/build.log" || { cat "$context/build.log" >&2; exit 1; }
echo "$tag"
