#!/usr/bin/env bash
# Instructions per frame of the mlx5 device model's own work (what `pktgen -b model` asks of the
# model's thread): runs benches/model.rs in its callgrind mode under valgrind and counts only
# inside the device's rounds (`Hw::process` after the driver posted 16 bursts of 32 60-byte
# frames), for three setups:
#   sink:      eMPW WQEs, the wire discards (pktgen -s 60, tx only),
#   sink-send: one SEND WQE per frame, the wire discards,
#   loop:      eMPW WQEs, the wire loops back into the port's receive queue (pktgen --txrx);
# and what a round that finds nothing to do costs (idle, per round: each poll of the model's
# thread while it waits for the driver). Every burst of 32 is followed by the device's rounds
# until one finds nothing (that last, idle round included in the per-frame figures).
#
# Usage: scripts/callgrind-model.sh [--base REV] [rounds]   (default 100 rounds = 51200 frames)
#   --base REV: also measure the model at git revision REV (built in a temporary worktree with
#   this bench copied in; its own target dir, target/callgrind-base, as cargo would take one
#   tree's artifacts for the other's in a shared one) and print both, same run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=100 BASE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=$2; shift 2 ;;
    ''|*[!0-9]*) echo "usage: $0 [--base REV] [rounds]" >&2; exit 2 ;;
    *) ROUNDS=$1; shift ;;
  esac
done
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
OUT=$(mktemp -d)
TOP=$PWD
cleanup() {
  if [ -n "$BASE" ] && [ -d "$OUT/base" ]; then git -C "$TOP" worktree remove --force "$OUT/base" || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT

# Builds the bench in directory $1 (target dir $2); prints the executable's path.
build() {
  (cd "$1" && CARGO_TARGET_DIR=$2 cargo build --release --bench model --message-format=json 2>/dev/null) \
    >"$OUT/build.json" || (cd "$1" && CARGO_TARGET_DIR=$2 cargo build --release --bench model >&2)
  grep -o '"executable":"[^"]*deps/model-[^"]*"' "$OUT/build.json" | tail -1 | cut -d'"' -f4
}

measure() { # label binary
  local label=$1 bin=$2 pkts=$((ROUNDS * 512)) line="" f ir
  [ -x "$bin" ] || { echo "$label: bench binary not found" >&2; exit 1; }
  for f in sink sink_send loop idle; do
    [ "$f" = idle ] && pkts=$((ROUNDS * 16))
    RAWQ_MODEL_CALLGRIND=$ROUNDS valgrind --tool=callgrind --callgrind-out-file="$OUT/$f.out" \
      --toggle-collect="*::callgrind_${f}" "$bin" >/dev/null 2>"$OUT/$f.log" \
      || { echo "$label $f failed:"; tail -5 "$OUT/$f.log"; exit 1; } >&2
    ir=$(callgrind_annotate "$OUT/$f.out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !d {gsub(",","",$1); print $1; d=1}')
    line+=$(printf ' %9s' "$(awk -v a="$ir" -v b="$pkts" 'BEGIN{printf "%.1f", a/b}')")
  done
  printf '%-28s%s\n' "$label" "$line"
}

echo "device model, instructions per frame ($((ROUNDS * 512)) frames each)"
printf '%-28s %9s %9s %9s %9s\n' "" sink sink-send loop "idle/round"
if [ -n "$BASE" ]; then
  rev=$(git rev-parse --short "$BASE")
  git worktree add --detach "$OUT/base" "$BASE" >/dev/null 2>&1
  cp benches/model.rs "$OUT/base/benches/model.rs"
  grep -q 'name = "model"' "$OUT/base/Cargo.toml" ||
    printf '\n[[bench]]\nname = "model"\nharness = false\nrequired-features = ["mlx5"]\n' >>"$OUT/base/Cargo.toml"
  measure "base $rev" "$(build "$OUT/base" "$TOP/target/callgrind-base")"
fi
measure "this tree $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo +)" "$(build . "$TOP/target")"
