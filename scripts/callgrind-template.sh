#!/usr/bin/env bash
# Instructions per frame of Stamper::write_at (the per-frame writer) and of
# FrameSource::fill_burst (what pktgen's send loop calls: the burst60* cases, bursts of 32 pool
# packets, `-s 60` with pktgen's defaults): runs crates/gen/benches/template.rs under valgrind
# once per case and counts only inside that case's callgrind_* function (loop and one black_box
# included; the stamper's and the pool's construction are a few thousand instructions, under
# 0.02 per frame at the default count).
#
# Usage: scripts/callgrind-template.sh [frames] [case ...]   (default 1000000, every case)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
shift || true
CASES=${*:-v4_port v4_port_seq v4_ip v4_ip_seq v6_port v6_port_seq v6_ip_seq v4_lat burst60 burst60_f1024_seq}
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -p rawq-gen --bench template --message-format=json 2>/dev/null >/tmp/rawq-tmpl-build.json || cargo build --release -p rawq-gen --bench template
BIN=$(grep -o '"executable":"[^"]*deps/template-[^"]*"' /tmp/rawq-tmpl-build.json | tail -1 | cut -d'"' -f4)
[ -x "$BIN" ] || { echo "bench binary not found" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for c in $CASES; do
  RAWQ_TMPL_FRAMES=$N valgrind --tool=callgrind --callgrind-out-file="$OUT/$c.out" \
    --toggle-collect="*::callgrind_${c}" "$BIN" "$c" >/dev/null 2>"$OUT/$c.log"
  IR=$(callgrind_annotate "$OUT/$c.out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !d {gsub(",","",$1); print $1; d=1}')
  echo "$c: $IR instructions / $N frames = $(awk -v a="$IR" -v b="$N" 'BEGIN{printf "%.1f", a/b}') per frame"
done
