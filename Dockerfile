# mm in a container: `docker run -i --rm IMAGE` speaks ACP on stdio.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/mm ./cmd/mm

# bash and coreutils are the agent's hands; the image stays small otherwise.
FROM debian:bookworm-slim
# tini reaps the orphans of killed command groups: mm would otherwise be
# PID 1 and they would pile up as zombies.
RUN apt-get update && apt-get install -y --no-install-recommends bash ca-certificates git tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 mm
COPY --from=build /out/mm /usr/local/bin/mm
USER mm
WORKDIR /home/mm
# Mount the config at /home/mm/.config/mm/config.yaml and skills under
# /home/mm/.config/mm/skills; mount the project to work on and open sessions in it.
VOLUME ["/home/mm/.config/mm"]
ENTRYPOINT ["tini", "--", "mm", "-acp"]
