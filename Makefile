# Developer shortcuts; the README's commands work without make.
.PHONY: build test bench stress release container-test

build:
	go build -o bin/ ./cmd/mm ./cmd/mm-node
	go build -o bin/mmstress ./cmd/mmstress

test:
	go test -race -timeout 30m ./...

# The hot-path benchmarks, then mmstress with its standard settings (in
# process, then one mm over pipes against the echo baseline), 10,000 idle
# sessions, and a cancel run. Under five minutes on two cores.
bench: build
	go test -run '^$$' -bench . -benchmem ./...
	$(MAKE) stress

stress: build
	bin/mmstress -quiet -sessions 1000 -turns 10 -concurrency 64
	bin/mmstress -quiet -sessions 1000 -turns 10 -concurrency 64 -procs 1 -mm bin/mm -baseline
	bin/mmstress -quiet -sessions 10000 -turns 0
	bin/mmstress -quiet -sessions 16 -turns 20 -concurrency 16 -cancel 1 -cancel-delay 20ms
	bin/mmstress -quiet -sessions 200 -turns 10 -concurrency 16 -bash 0.2 -edit 0.1 -ask 0.1 -cancel 0.1 -fail 0.05 -persist

# Release archives for every platform in dist/ (scripts/release.sh says more):
# make release VERSION=v1.2.3
release:
	@test -n "$(VERSION)" || { echo 'usage: make release VERSION=v1.2.3' >&2; exit 2; }
	scripts/release.sh $(VERSION)

# Build the image and run docs/container.md's commands against it (mm -acp,
# mm serve); skips when no docker or podman engine answers.
container-test:
	scripts/container-test.sh
