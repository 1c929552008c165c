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
# "alloc" is `Queue::alloc_burst` of 32 from the queue's own cache (the one its send completions
# refill, as pktgen's send loop takes its buffers), the burst sent outside the counted function;
# "txcache" is that burst's send (eMPW, the model after each burst): pktgen's driver path, the
# completions returning buffers to the cache they came from (in "txempw" the buffers come from
# the pool, and a third of the bulk returns overflow the cache to the pool under its lock).
# "txfull" is a burst offered to an eMPW queue whose ring is full and whose CQ is empty (the
# device idle): instructions a call (16 calls a round), what an empty call costs a sender
# (bench-vs-dpdk.sh's "c", which its fit adds a 32nd of to the driver's figure).
# Beside the instructions: the data-cache misses a packet from callgrind's cache simulation (D1
# and LL read / write misses; its geometry pinned to this VM's caches, as bench-vs-dpdk.sh).
#
# Usage: [LINES="tx alloc ..."] scripts/callgrind-dv.sh [rounds]   (default 200 rounds = 102400
#        packets each way; LINES: which lines, default all)
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
CACHE=(--cache-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL=33554432,16,64)
for dir in ${LINES:-tx tx18 txdev txempw txcache txfull alloc rx rxzip}; do
  RAWQ_DV_CALLGRIND=$ROUNDS valgrind --tool=callgrind "${CACHE[@]}" --callgrind-out-file="$OUT/$dir.out" \
    --toggle-collect="*::callgrind_${dir}" "$BIN" >/dev/null 2>"$OUT/$dir.log"
  # The file's own totals (what was collected): "events:" names the columns of "summary:".
  if [ "$dir" = txfull ]; then
    awk -v n=$((ROUNDS * 16)) '/^summary:/ { printf "txfull: %d instructions / %d calls = %.1f per call\n", $2, n, $2 / n }' "$OUT/$dir.out"
    continue
  fi
  awk -v dir="$dir" -v n="$PKTS" '
    /^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
    /^summary:/ { for (i = 2; i <= NF; i++) v[i] = $i }
    END {
      printf "%s: %d instructions / %d packets = %.1f per packet; data-cache misses a packet: D1 %.3f r %.3f w, LL %.3f r %.3f w\n",
        dir, v[col["Ir"]], n, v[col["Ir"]] / n, v[col["D1mr"]] / n, v[col["D1mw"]] / n, v[col["DLmr"]] / n, v[col["DLmw"]] / n
    }' "$OUT/$dir.out"
done
