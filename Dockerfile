# mm in a container: `docker run -i --rm IMAGE` speaks ACP on stdio
# (mm -acp); `IMAGE serve -listen 0.0.0.0:8765` serves it on the network.
#
#   docker build -t mm .
#   docker run -i --rm --user "$(id -u):$(id -g)" --network=host \
#     -v ~/.config/mm:/home/mm/.config/mm:ro -v "$PWD:$PWD" -w "$PWD" mm
#   docker run --rm --user "$(id -u):$(id -g)" -p 127.0.0.1:8765:8765 -e MM_SERVE_TOKEN \
#     -v ~/.config/mm:/home/mm/.config/mm:ro -v "$PWD:$PWD" -w "$PWD" mm serve -listen 0.0.0.0:8765
#
# Run it as yourself (--user; podman: --userns=keep-id) so that what the agent
# writes in the project belongs to you, and mount the project at the path it
# has on the host so that the editor's paths are valid inside.
# docs/container.md has podman, a model server on the host, and Zed;
# scripts/container-test.sh drives a real session through the image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# --build-arg VERSION=v1.2.3 sets what `mm --version` prints; without it,
# the version in the source.
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w${VERSION:+ -X github.com/mm-agent/mm/protocol.Version=$VERSION}" \
      -o /out/mm ./cmd/mm

# bash, coreutils and git are the agent's hands; the image stays small otherwise.
FROM debian:bookworm-slim
# tini reaps the orphans of killed command groups: mm would otherwise be
# PID 1 and they would pile up as zombies.
# HOME is /home/mm for every uid: the caller's uid has no passwd entry here,
# so HOME and its .config and .cache are writable by anyone (sticky, as /tmp).
# The project belongs to the caller, not to the image's user: git must not
# refuse it as "dubious ownership".
RUN apt-get update && apt-get install -y --no-install-recommends bash ca-certificates git tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /home/mm --shell /bin/bash mm \
 && mkdir -p /home/mm/.config /home/mm/.cache \
 && chmod 1777 /home/mm /home/mm/.config /home/mm/.cache \
 && git config --system --add safe.directory '*'
ENV HOME=/home/mm
COPY --from=build /out/mm /usr/local/bin/mm
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
