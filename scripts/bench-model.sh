#!/usr/bin/env bash
# pktgen on the mlx5 device model: which thread limits the rate?
#
# Runs `pktgen -b model -s 60 -t SECONDS --cores 0 --json` (release build; the model's thread goes
# to a CPU the queue does not use) and reports
#   - Mpps (pktgen's own count over its active window),
#   - the busy share of the sender thread and of the model's thread (rawq-mlx5-model): CPU time
#     (utime + stime from /proc/<pid>/task/<tid>/stat) over wall time, sampled from 1 s into the
#     run to 0.5 s before its end,
#   - the ring-full fraction, two ways: tx_burst calls that took fewer packets than offered
#     (full-bursts: tx_ring_full_bursts / tx_bursts from --json), and the share of the active
#     window the sender spent with packets left over from a full ring (full-time:
#     tx_ring_full_ns), with the number of such stretches a second. A sender spinning on a full
#     ring makes many cheap bursts, so full-bursts overstates a few short stalls; full-time says
#     how long the device held the sender back ("n/a" for a pktgen without these counters),
#   - each thread's CPU time per frame (ns; the sender's includes its spinning on a full ring),
#   - what the model's thread did with its CPU time (its own counters, in --json): the share of
#     its polls that found nothing to do (idle%), and its work share: time in polls that found
#     work over the active window (work%; its busy share above counts its idle polling too, as
#     it polls whether or not there is work), with the work time per frame (wrk-ns).
# The driver is the limit when the model finds a real share of its polls idle (it waits for
# the sender) and the ring is rarely full; a ring that is nearly always full and no idle polls
# say the device model is. `limit` sums it up: driver (idle >= 10% and full-time < 10%), model
# (idle < 1% and full-time >= 50%), else mixed. On a loaded machine a descheduled model thread
# fills the ring too: read the load average printed first.
#
# Usage: scripts/bench-model.sh [--bin PATH] [--seconds N] [--rounds N] [-- extra pktgen args]
#   --bin: a pktgen binary to measure instead of building one (e.g. an older build to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="" SECS=5 ROUNDS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  cargo build --release --bin rawq-pktgen >&2
  BIN=target/release/rawq-pktgen
fi
[ -x "$BIN" ] || { echo "$BIN: not an executable" >&2; exit 1; }
(( SECS >= 2 )) || { echo "--seconds must be at least 2 (1 s warm-up, 0.5 s tail)" >&2; exit 2; }
HZ=$(getconf CLK_TCK)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# CPU ticks (utime + stime) of one thread; fields after the ")" of the comm.
ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/task/$2/stat" 2>/dev/null || echo 0; }
# The sender thread: of the threads that are neither the main thread nor the model's (ctrlc has
# one that waits for signals), the one that used the most CPU; the model's by name.
threads() {
  local pid=$1 t name sender="" model="" best=-1 n
  for t in /proc/"$pid"/task/*; do
    t=${t##*/}
    name=$(cat "/proc/$pid/task/$t/comm" 2>/dev/null || true)
    if [ "$name" = rawq-mlx5-model ]; then model=$t
    elif [ "$t" != "$pid" ]; then
      n=$(ticks "$pid" "$t")
      if (( n > best )); then best=$n; sender=$t; fi
    fi
  done
  echo "$sender $model"
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $BIN"
printf '%-6s %8s %8s %8s %8s %8s %10s %10s %8s %6s %6s %6s %7s\n' round Mpps sender% model% \
  work% idle% full-bursts full-time stretch/s snd-ns mdl-ns wrk-ns limit
for r in $(seq 1 "$ROUNDS"); do
  "$BIN" -b model -s 60 -t "$SECS" --cores 0 --json --quiet "$@" >"$OUT/json" 2>"$OUT/err" &
  PID=$!
  sleep 1
  read -r S M <<<"$(threads "$PID")"
  if [ -z "$S" ] || [ -z "$M" ]; then
    wait "$PID" || true
    echo "round $r: sender or model thread not found (pktgen said: $(tail -2 "$OUT/err"))" >&2
    exit 1
  fi
  t0=$(date +%s.%N); s0=$(ticks "$PID" "$S"); m0=$(ticks "$PID" "$M")
  sleep "$(awk -v s="$SECS" 'BEGIN { print s - 1.5 }')"
  t1=$(date +%s.%N); s1=$(ticks "$PID" "$S"); m1=$(ticks "$PID" "$M")
  wait "$PID" || { echo "pktgen failed: $(cat "$OUT/err")" >&2; exit 1; }
  python3 - "$OUT/json" "$t0" "$t1" "$s0" "$s1" "$m0" "$m1" "$HZ" "$r" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t0, t1, s0, s1, m0, m1, hz = map(float, sys.argv[2:9])
wall = (t1 - t0) * hz
# Older pktgen builds have no burst counters: "n/a".
full = (f"{100 * j['tx_ring_full_bursts'] / j['tx_bursts']:9.1f}%"
        if j.get("tx_bursts") else f"{'n/a':>10}")
pps = j["pps"]
# CPU time per frame of each thread over the sampled window (busy share / rate).
ns = lambda t: f"{1e9 * t / wall / pps:6.1f}" if pps else "   n/a"
sender, model = (s1 - s0) / wall, (m1 - m0) / wall
# The model thread's own counters (whole run; its work happens in the active window). Older
# pktgen builds have none: "n/a".
polls, idle, work = (j.get(k) for k in ("model_polls", "model_idle_polls", "model_work_ns"))
pct = lambda x: f"{100 * x:7.1f}%"
if polls:
    idle_f, work_f = idle / polls, work / 1e9 / j["duration_s"] if j["duration_s"] else 0
    idle_s, work_s = pct(idle_f), pct(work_f)
    wns = f"{work / j['packets']:6.1f}" if j["packets"] else "   n/a"
else:
    idle_f, idle_s, work_s, wns = None, f"{'n/a':>8}", f"{'n/a':>8}", "   n/a"
# The share of the active window the sender spent with packets left over from a full ring,
# and how many such stretches a second (older builds: bursts only, "n/a").
dur = j["duration_s"]
if "tx_ring_full_ns" in j and dur:
    full_f = j["tx_ring_full_ns"] / 1e9 / dur
    ftime, fstr = pct(full_f), f"{j['tx_ring_full_stretches'] / dur:8.0f}"
else:
    full_f, ftime, fstr = None, f"{'n/a':>8}", f"{'n/a':>8}"
if idle_f is None or full_f is None:
    limit = "n/a"
elif idle_f >= 0.10 and full_f < 0.10:
    limit = "driver"
elif idle_f < 0.01 and full_f >= 0.50:
    limit = "model"
else:
    limit = "mixed"
print(f"{sys.argv[9]:<6} {pps / 1e6:8.3f} {pct(sender)} {pct(model)} {work_s} {idle_s} {full} {ftime:>10} {fstr} "
      f"{ns(s1 - s0)} {ns(m1 - m0)} {wns} {limit:>7}")
EOF
done
