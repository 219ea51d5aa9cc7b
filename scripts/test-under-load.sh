#!/usr/bin/env bash
# Runs CI (.ci/run: the README's test command on an empty build cache, and
# the rest) while two CPU-bound processes keep the machine busy at normal
# priority for the whole run, as a newcomer's machine may be: a test whose
# verdict depends on the machine's speed fails here first. It starts the
# load itself and stops it however the run ends, then prints the wall time.
#
# The six cross-builds of .ci/run are left out (a build's verdict does not
# depend on the machine's speed, and under this load they take over 10
# minutes); CROSS=1 keeps them.
#
#   scripts/test-under-load.sh          two busy processes
#   LOAD=4 scripts/test-under-load.sh   four
#   CROSS=1 scripts/test-under-load.sh  with the cross-builds
set -uo pipefail
cd "$(dirname "$0")/.."
n=${LOAD:-2}
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait "${pids[@]}" 2>/dev/null
}
trap stop EXIT
for _ in $(seq "$n"); do
	# bash's own busy loop: CPU-bound, no I/O, the default nice value.
	bash -c 'while :; do :; done' &
	pids+=($!)
done
echo "test-under-load: $n busy process(es) started (${pids[*]})" >&2
start=$(date +%s)
MM_CI_CROSS=${CROSS:-0} bash .ci/run
rc=$?
echo "test-under-load: .ci/run exited $rc after $(( $(date +%s) - start )) s under a load of $n" >&2
exit $rc
