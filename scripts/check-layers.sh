#!/usr/bin/env bash
# No import circles between modules, no import up a layer (issue 30): the rule and the layer
# tables are in docs/architecture.md, "Layer order"; scripts/check-layers.py does the work (run
# it with --help for what it reads and what it leaves out: test code is outside the rule).
#
# ENFORCE: the packages whose circles, upward imports or modules missing from their layer table
# fail this script (and so CI). REPORT: the packages only reported, until the restructuring
# under way in them lands; move a package from REPORT to ENFORCE (and give it a table) once
# its report is clean. Both can be set from the environment, comma-separated.
#
# The checker's own tests run first (each must find the circle or upward import planted in a
# fixture). Extra arguments go to check-layers.py, e.g. --graph to list every import between
# sibling modules.
set -euo pipefail
cd "$(dirname "$0")/.."
ENFORCE=${ENFORCE:-rawq,rawq-model,rawq-emu,rawq-gen,rawq-tools,rawq-testkit}
REPORT=${REPORT:-}

if ! out=$(python3 scripts/check-layers-test.py 2>&1); then
    echo "$out"
    echo "check-layers: the checker's own tests failed" >&2
    exit 1
fi
echo "check-layers: the checker's own tests pass (${out##*$'\n'})"
python3 scripts/check-layers.py --enforce "$ENFORCE" --report "$REPORT" "$@"
