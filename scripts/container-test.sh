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
# The page's commands differ with the engine and with who runs it, and so
# does the block the test runs (MM_CONTAINER_MODE, as the markers name them):
#   docker           Docker whose daemon runs as root (the usual install),
#                    called by you or by root: --user "$(id -u):$(id -g)"
#   docker-rootless  Docker's rootless daemon: --user 0:0 (its root is you)
#   podman-rootless  Podman run by a user other than root:
#                    --userns=keep-id --user "$(id -u):$(id -g)"
#   podman-rootful   Podman run by root (or a client of a root Podman
#                    service): the Docker form, --user "$(id -u):$(id -g)";
#                    it refuses keep-id
# The engine says which it is (`podman info`: Host.Security.Rootless;
# `docker info`: SecurityOptions name=rootless), so a `docker` that is
# Podman's docker shim gets Podman's block.
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

# Podman answers Host.Security.Rootless (also through a `docker` shim);
# Docker has no such field and fails the template.
if rootless=$("$engine" info --format '{{.Host.Security.Rootless}}' 2>/dev/null); then
	case $rootless in
	true) mode=podman-rootless ;;
	false) mode=podman-rootful ;;
	*)
		echo "container-test: \`$engine info\` says Host.Security.Rootless is \"$rootless\", want true or false" >&2
		exit 1
		;;
	esac
elif [[ $("$engine" info --format '{{json .SecurityOptions}}') == *name=rootless* ]]; then
	mode=docker-rootless
else
	mode=docker
fi

# The build uses the base images the engine has and never asks a registry
# (the test machine reaches none): Podman's --pull=never fails at once,
# naming the image, when one is missing. Docker's --pull is a yes/no
# ("never" is no word of its), and without it Docker's build fetches only
# what it has not.
pull=()
case $mode in
podman-*) pull=(--pull=never) ;;
esac
image=${IMAGE:-mm:container-test}
echo "container-test: building $image with $engine ($mode, as uid $(id -u))"
"$engine" build "${pull[@]}" -t "$image" .
echo "container-test: driving mm -acp and mm serve in $image, with docs/container.md's $mode commands"
MM_CONTAINER_ENGINE=$engine MM_CONTAINER_IMAGE=$image MM_CONTAINER_MODE=$mode \
	go test -tags container -count=1 -run '^TestContainer' -v ./cmd/mm
size=$("$engine" image inspect --format '{{.Size}}' "$image")
echo "container-test: OK; image $image is $((size / 1000000)) MB ($size bytes)"
