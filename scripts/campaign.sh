#!/usr/bin/env bash
# Runs rawq's seeded fault campaign (crates/tools/tests/campaign) for a while: seeds from S on,
# one after the other, until N minutes have passed; each seed draws a configuration of
# rawq-pktgen or rawq-fwd and one fault, runs it and checks the invariants (docs/testing.md,
# "The fault campaign").
#
# Usage: bash scripts/campaign.sh [--minutes N] [--seed S] [--report FILE]
#   --minutes N   how long to run (default 30); a seed started before the end runs to its end
#   --seed S      the first seed (default 1)
#   --report FILE the Markdown report: seeds, configurations, faults, outcomes, violations
#                 (default: $CARGO_TARGET_DIR/campaign-report.md, or target/campaign-report.md)
# Exits non-zero when any run broke an invariant (each is listed with its reproduce line:
# RAWQ_CAMPAIGN_SEED=N runs that seed alone). Needs root for the xdp runs' namespaces; with
# RAWQ_REQUIRE_NETNS=1 they fail instead of being skipped.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=30 SEED=1 REPORT=''
usage() {
  echo "usage: $0 [--minutes N] [--seed S] [--report FILE]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --minutes)
      [[ ${2-} =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "campaign: --minutes needs a number of minutes" >&2; usage; }
      MINUTES=$2; shift 2 ;;
    --seed)
      [[ ${2-} =~ ^[0-9]+$ ]] || { echo "campaign: --seed needs a whole number" >&2; usage; }
      SEED=$2; shift 2 ;;
    --report)
      [[ -n ${2-} && ${2-} != -* ]] || { echo "campaign: --report needs a file name" >&2; usage; }
      REPORT=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "campaign: unknown option $1" >&2; usage ;;
  esac
done
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
[[ -n $REPORT ]] || REPORT=$TARGET/campaign-report.md
# A relative report path is the caller's, not the test's (cargo runs tests in the crate).
[[ $REPORT == /* ]] || REPORT=$PWD/$REPORT
echo "campaign: seeds from $SEED for $MINUTES min; report: $REPORT" >&2
cd "$ROOT"
set +e
RAWQ_CAMPAIGN_SEED=$SEED RAWQ_CAMPAIGN_MINUTES=$MINUTES RAWQ_CAMPAIGN_REPORT=$REPORT \
  cargo test -p rawq-tools --test campaign -- --ignored --exact campaign --nocapture
status=$?
set -e
if [[ -e $REPORT ]]; then
  echo "campaign: report in $REPORT" >&2
else
  echo "campaign: no report was written (the test binary did not get that far; see above)" >&2
  ((status)) || status=1
fi
exit "$status"
