#!/usr/bin/env bash
# Instructions per packet of the mlx5 DV data path, each way, with the device model completing
# inline: runs benches/dv.rs in its callgrind mode under valgrind and counts only inside the
# timed functions (tx_burst over 16 bursts of 32, min inline 0 ("tx") and 18 ("tx18");
# rx_burst + refill over 16 bursts of 32, every packet carrying its metadata ("rx")).
# "txdev" and "txempw" (min inline 0, SEND and eMPW WQEs) let the model work after every burst
# instead of after 16: each burst then finds one completion, as from a device running beside
# the sender (what pktgen sees on the emulated NIC), not a batch of 16 that one bulk free returns.
# "rxzip" is "rx" with CQE compression (hash-format mini-CQEs, rawq's default and what the
# emulated ConnectX-5 sends): the packets come from compressed sessions of up to 64.
#
# Usage: scripts/callgrind-dv.sh [rounds]     (default 200 rounds = 102400 packets each way)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-200}
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# The build's report in this run's own directory: a fixed path in /tmp is shared with any other
# checkout running this script at the same time (and then names the other one's binary).
cargo build --release --bench dv --message-format=json 2>/dev/null >"$OUT/build.json" || cargo build --release --bench dv
BIN=$(grep -o '"executable":"[^"]*deps/dv-[^"]*"' "$OUT/build.json" | tail -1 | cut -d'"' -f4)
[ -x "$BIN" ] || { echo "bench binary not found" >&2; exit 1; }
PKTS=$((ROUNDS * 512))
for dir in tx tx18 txdev txempw rx rxzip; do
  RAWQ_DV_CALLGRIND=$ROUNDS valgrind --tool=callgrind --callgrind-out-file="$OUT/$dir.out" \
    --toggle-collect="*::callgrind_${dir}" "$BIN" >/dev/null 2>"$OUT/$dir.log"
  IR=$(callgrind_annotate "$OUT/$dir.out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !d {gsub(",","",$1); print $1; d=1}')
  echo "$dir: $IR instructions / $PKTS packets = $(awk -v a="$IR" -v b="$PKTS" 'BEGIN{printf "%.1f", a/b}') per packet"
done
