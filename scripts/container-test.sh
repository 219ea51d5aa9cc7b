#!/usr/bin/env bash
# Build the image and drive mm inside it with a real ACP client
# (cmd/mm/container_test.go, build tag "container"), running the commands
# docs/container.md gives for the engine, as written there (the sh blocks
# marked <!-- container-test: … -->; the test changes only what the page
# lists, e.g. a temporary home and project), so that a wrong page fails:
#   - on stdio (the default, -acp): initialize, a session in a project
#     mounted at its host path, a turn whose scripted model has bash write a
#     file (which must belong to the caller on the host) as the caller, one
#     that commits with the git identity the command gives; then stdin
#     closes and the container must exit;
#   - on the network (`serve -listen 0.0.0.0:8765`, the port published):
#     the same turns through `mm connect` on the host, and the smallest
#     serve command (`-p 8765:8765 -e MM_SERVE_TOKEN=… IMAGE serve …`);
#     `stop` drains each and the container must exit 0;
#   - `IMAGE --version`, and words mm does not understand refused (exit 2).
# Prints the image size.
#
#   scripts/container-test.sh              docker, else podman
#   ENGINE=podman scripts/container-test.sh
#   IMAGE=mm:dev scripts/container-test.sh  the tag to build (default mm:container-test)
#
# With no engine that answers (`docker info` fails), it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

engine=""
why=()
for e in ${ENGINE:-docker podman}; do
	if ! command -v "$e" >/dev/null 2>&1; then
		why+=("$e: not installed")
		continue
	fi
	if err=$("$e" info 2>&1 >/dev/null); then
		engine=$e
		break
	fi
	why+=("$e: \`$e info\` failed: $(printf '%s\n' "$err" | grep -v '^\s*$' | tail -n 1)")
done
if [[ -z $engine ]]; then
	echo "container-test: SKIP: no container engine is available"
	printf '  %s\n' "${why[@]}"
	exit 0
fi

image=${IMAGE:-mm:container-test}
echo "container-test: building $image with $engine"
"$engine" build -t "$image" .
echo "container-test: driving mm -acp and mm serve in $image"
MM_CONTAINER_ENGINE=$engine MM_CONTAINER_IMAGE=$image \
	go test -tags container -count=1 -run '^TestContainer' -v ./cmd/mm
size=$("$engine" image inspect --format '{{.Size}}' "$image")
echo "container-test: OK; image $image is $((size / 1000000)) MB ($size bytes)"
