#!/usr/bin/env bash
# Runs one benchmark: scripts/bench.sh NAME [ARGS...]; each prints one JSON
# line with its figures beside a baseline measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-}
if [[ -z $name || ! -x scripts/bench/$name.sh ]]; then
    echo "usage: scripts/bench.sh NAME   (available: $(cd scripts/bench && ls ./*.sh | sed 's|^\./||; s|\.sh$||' | tr '\n' ' '))" >&2
    exit 2
fi
shift
exec "scripts/bench/$name.sh" "$@"
