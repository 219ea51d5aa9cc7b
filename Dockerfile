# mm in a container: `docker run -i --rm IMAGE` speaks ACP on stdio
# (mm -acp); `IMAGE serve -listen 0.0.0.0:8765` serves it on the network.
#
#   docker build -t mm .
#   mkdir -p ~/.config/mm
#   docker run -i --rm --user "$(id -u):$(id -g)" --network=host \
#     -v ~/.config/mm:/home/mm/.config/mm:ro -v "$PWD:$PWD" -w "$PWD" mm
#   docker run --rm --user "$(id -u):$(id -g)" -p 127.0.0.1:8765:8765 -e MM_SERVE_TOKEN \
#     --device /dev/net/tun --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
#     -v ~/.config/mm:/home/mm/.config/mm:ro -v "$PWD:$PWD" -w "$PWD" mm serve -listen 0.0.0.0:8765
#
# Run it as yourself so that what the agent writes in the project belongs
# to you: docker --user "$(id -u):$(id -g)"; rootless podman
# --userns=keep-id --user "$(id -u):$(id -g)" (keep-id alone leaves the
# image's USER below in force on all but recent Podman, 4.3 in Debian 12
# among them: uid 10001, which cannot write your files); podman as root
# (rootful) docker's form, for it refuses keep-id. Mount the project
# at the path it has on the host so that the editor's paths are valid
# inside, and create ~/.config/mm before mounting it (or leave that mount
# out for the embedded defaults). docs/container.md has podman, a model
# server on the host, git's identity and Zed; scripts/container-test.sh runs
# its commands against the image. mm serve confines its tenants' commands
# (docs/sandbox.md) with the bubblewrap and slirp4netns installed below,
# which need from the engine what the serve command above gives them:
# docs/container.md says which, and what holds without them.

# The builder's patch version is go.mod's `go` line: go.mod requires it, and
# the image builds with GOTOOLCHAIN=local, so an older golang:1.26 in the
# engine's cache would fail the build (cmd/mm/containerdoc_test.go checks
# that the two agree). The base images are named in full
# (docker.io/library/…): Podman resolves a short name only through its
# configuration, and Debian's has no alias for golang.
FROM docker.io/library/golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# --build-arg VERSION=v1.2.3 sets what `mm --version` prints; without it,
# the version in the source.
ARG VERSION=
# The image is how a cluster is deployed (deploy/, docs/cluster.md), so it
# has mm-node, mm with the cluster, beside mm, with every cluster provider:
# `mm serve` runs it when the config names a cluster. mm itself, which
# editors start, links no cluster (docs/benchmarks.md).
ARG TAGS=etcd,consul,k8s
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w${VERSION:+ -X github.com/mm-agent/mm/protocol.Version=$VERSION}" \
      -o /out/mm ./cmd/mm && \
    CGO_ENABLED=0 go build -trimpath -tags "$TAGS" \
      -ldflags "-s -w${VERSION:+ -X github.com/mm-agent/mm/protocol.Version=$VERSION}" \
      -o /out/mm-node ./cmd/mm-node

# bash, coreutils, git and ps (procps) are the agent's hands; bubblewrap and
# slirp4netns (with util-linux's unshare, nsenter and setpriv) confine them
# under mm serve: a mount, PID and user namespace per command, and a network
# of the session's own that reaches the outside but not the container's
# loopback. The image stays small otherwise.
FROM docker.io/library/debian:bookworm-slim
# tini is PID 1 so that mm is not. It is not there for the orphans of the
# agent's commands: mm is their child subreaper (internal/procs) and reaps
# them itself, and it handles SIGTERM and SIGINT (drain, exit 0), which tini
# hands on. PID 1 must also reap what no one else does, e.g. what
# `docker exec` leaves behind, in every mode: `mm connect` is no subreaper,
# and as PID 1 its zombies would pile up. And a signal that mm leaves to
# Go's default (SIGHUP) ends it with 129, as a signal; the kernel lets no
# default action kill PID 1, so there Go falls back to exit 2, the status of
# a usage error.
# HOME is /home/mm for every uid: the caller's uid has no passwd entry here,
# so HOME and its .config and .cache are writable by anyone (sticky, as /tmp).
# The project belongs to the caller, not to the image's user: git must not
# refuse it as "dubious ownership". git has no identity here on purpose: the
# caller gives theirs (-e GIT_AUTHOR_NAME… or a read-only ~/.gitconfig, see
# docs/container.md), and without one `git commit` fails with git's own
# "Author identity unknown", which the agent sees, rather than committing as
# someone made up.
RUN apt-get update && apt-get install -y --no-install-recommends bash bubblewrap ca-certificates git procps slirp4netns tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /home/mm --shell /bin/bash mm \
 && mkdir -p /home/mm/.config /home/mm/.cache \
 && chmod 1777 /home/mm /home/mm/.config /home/mm/.cache \
 && git config --system --add safe.directory '*'
ENV HOME=/home/mm
COPY --from=build /out/mm /out/mm-node /usr/local/bin/
# Non-root unless the caller says otherwise (--user).
USER 10001:10001
WORKDIR /home/mm
# The config is read from $HOME/.config/mm/config.yaml: mount ~/.config/mm
# there (read-only is enough; skills go under .../skills), or pass
# -e MM_CONFIG=/path/inside. With no config, mm uses its embedded defaults.
# The entrypoint is mm, and -acp only its default argument: the caller's
# words replace it (`IMAGE serve -listen 0.0.0.0:8765`, `IMAGE --version`,
# `IMAGE connect URL`). mm refuses words it does not understand, so a
# mistaken command fails instead of speaking ACP on stdio.
ENTRYPOINT ["tini", "--", "mm"]
CMD ["-acp"]
# mm serve's port, when the container serves the network.
EXPOSE 8765
