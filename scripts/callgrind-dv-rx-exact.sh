#!/usr/bin/env bash
# rawq's DV receive driver cost per packet on the emulated ConnectX-5, from exact counts (no
# fit): the method docs/performance.md's "rawq's receive figure from exact counts" describes.
#
# * A loaded run: `pktgen -b dv --rx` (burst 32, CQE compression, the default) under callgrind,
#   fed COUNT 60-byte frames by the emulator's own frame source with flow control on
#   (RAWQ_EMU_RXGEN, RAWQ_EMU_PAUSE=1, as scripts/bench-vs-dpdk.sh's rx mode), until the device
#   has taken them all.
# * An idle run: the same with nothing arriving, so that every rx_burst is empty; its
#   instructions / calls is what one empty call costs (an integer: the empty poll has one path).
# * pktgen calls `on_rx` only after a burst that brought packets, so the non-empty bursts are
#   on_rx's call count and the empty ones the rest; per packet =
#   (rx_burst inclusive - empty cost * empty calls) / packets.
#
# Usage (as root): bash scripts/callgrind-dv-rx-exact.sh [COUNT] [RING]   (200000, 8192)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD COUNT=${1:-200000} RING=${2:-8192}
for t in valgrind callgrind_annotate python3; do
  command -v $t >/dev/null || { echo "$t not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
cargo build --release --quiet --all-features --bin rawq-pktgen
cargo build --release --quiet -p rawq-emu
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export RAWQ_EMU_LIB=$TARGET/release/librawq_emu.so
export RAWQ_EMU_SYSFS=$TARGET/release/rawq-emu-sysfs
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rawq-rx-exact.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
VG=(valgrind --tool=callgrind --separate-threads=yes --fair-sched=yes)

# run TAG [COUNT]: pktgen --rx under callgrind; with COUNT, until the device took COUNT frames,
# else for 12 s of nothing.
run() {
  local tag=$1 n=${2:-}
  env RAWQ_EMU_PAUSE=1 ${n:+RAWQ_EMU_RXGEN=$n} RAWQ_EMU_STATS="$OUT/$tag.emu" bash scripts/emu.sh -- \
    "${VG[@]}" --callgrind-out-file="$OUT/$tag.out" "$TARGET/release/rawq-pktgen" \
    -b dv -d mlx5_0 --rx --burst 32 --ring "$RING" --json >"$OUT/$tag.json" 2>"$OUT/$tag.log" &
  local pid=$! i
  if [[ -n $n ]]; then
    for i in $(seq 2400); do
      python3 - "$OUT/$tag.emu" "$n" <<'EOF' && break
import re, sys
try:
    t = open(sys.argv[1]).read()
except OSError:
    sys.exit(1)
m = re.search(r' rx_frames: (\d+)', t)
sys.exit(0 if 'done: true' in t and m and int(m[1]) >= int(sys.argv[2]) else 1)
EOF
      sleep 0.5
    done
    sleep 3 # the last bursts
  else
    sleep 12
  fi
  kill -TERM $pid 2>/dev/null || true
  wait $pid || true # emu.sh answers SIGTERM with 143 once pktgen has stopped
}
run loaded "$COUNT"
run idle

python3 - "$OUT" "$COUNT" <<'EOF'
import glob, json, re, subprocess, sys
out, n = sys.argv[1], int(sys.argv[2])
def counts(tag):
    for f in sorted(glob.glob('%s/%s.out-*' % (out, tag))):
        t = subprocess.run(['callgrind_annotate', '--tree=calling', '--inclusive=yes',
                            '--threshold=100', f], capture_output=True, text=True).stdout
        m = re.search(r'^\s*([\d,]+) \([^)]*\)\s+>\s+\S*DvQueue as rawq::queue::QueueOps>::'
                      r'rx_burst \(([\d,]+)x\)', t, re.M)
        if m:
            on = re.search(r'^\s*[\d,]+ \([^)]*\)\s+>\s+\S*QueueMeasure::on_rx \(([\d,]+)x\)', t, re.M)
            num = lambda s: int(s.replace(',', ''))
            return num(m[1]), num(m[2]), num(on[1]) if on else 0
    sys.exit('no rx_burst calls found in the %s run (%s)' % (tag, out))
got = json.load(open(out + '/loaded.json'))['packets']
if got != n:
    sys.exit('pktgen counted %d packets of %d' % (got, n))
i_idle, c_idle, ne_idle = counts('idle')
if ne_idle or i_idle % c_idle:
    sys.exit('the idle run is not all alike empty calls: %d instructions, %d calls, %d non-empty'
             % (i_idle, c_idle, ne_idle))
e = i_idle // c_idle
i, c, ne = counts('loaded')
print('an empty rx_burst: %d instructions (idle run: %d calls, %d instructions)' % (e, c_idle, i_idle))
print('loaded run: rx_burst %d instructions in %d calls, %d of them non-empty (bursts of %.2f)'
      % (i, c, ne, n / ne))
print('rx driver (rx_burst incl. refill and metadata): (%d - %d x %d) / %d = %.2f instructions a packet'
      % (i, e, c - ne, n, (i - e * (c - ne)) / n))
EOF
