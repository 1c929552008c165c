#!/usr/bin/env bash
# rawq bench: pktgen over AF_XDP against trafgen (netsniff-ng) and dpdk-testpmd (net_af_xdp, txonly),
# and pktgen's live-frames engine (--engine live) against xdp-trafficgen (xdp-tools), on the same
# veth pair, same frame size, one sender core, every tool judged at the receiver.
#
# Two throwaway network namespaces joined by a veth pair; the receiving end runs an XDP program
# that drops every frame (pktgen --rx --rule 'promiscuous -> drop'). Each sender in turn is
# pinned to core 0 and sends N-byte UDP/IPv4 frames (no FCS) as fast as it can; once frames
# arrive, a warm-up is skipped and the frames the receiver's XDP program dropped
# (ethtool -S: rx_queue_0_xdp_drops) are counted over the measurement window. Every tool is
# measured by that same counter; each tool's own figure is printed too where it gives one.
#
# Usage (as root): bash scripts/bench-xdp.sh [--seconds 5] [--warmup 1] [--size 60] [--rounds 1]
#                              [--tools pktgen,live,trafficgen,testpmd,trafgen] [--burst 32]
# Tools: pktgen = rawq pktgen, AF_XDP engine; live = rawq pktgen --engine live (the kernel's
# live-frames generator, BPF_F_TEST_XDP_LIVE_FRAMES); trafficgen = xdp-trafficgen udp (same
# kernel facility; its frame is its own fixed 62-byte IPv6/UDP one, it has no size option in
# Debian's 1.3.1); testpmd; trafgen. xdp-trafficgen is probed first: if it cannot run on this
# kernel it is skipped with its reason.
# PKTGEN=/path/to/pktgen uses that binary instead of building one; TRAFGEN, TESTPMD and
# TRAFFICGEN override /usr/sbin/trafgen, dpdk-testpmd and /usr/sbin/xdp-trafficgen; BENCH_KEEP=1 keeps each tool's output (path printed at
# exit). With several rounds the tools take turns and the summary gives each tool's median and
# best. A tool that is not installed is reported as n/a. The machine should be otherwise idle:
# on a shared one the figures swing by ±30 % from run to run; the sender's CPU time per frame
# (also printed) is steadier.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=5 WARMUP=1 SIZE=60 ROUNDS=1 TOOLS=pktgen,live,trafficgen,testpmd,trafgen BURST=32
usage() {
  echo "usage: $0 [--seconds S] [--warmup S] [--size N] [--rounds R] [--tools a,b,c] [--burst B]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --seconds) SECS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --size) SIZE=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --tools) TOOLS=${2:?}; shift 2 ;;
    --burst) BURST=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) usage ;;
  esac
done
[[ $SECS =~ ^[0-9]+([.][0-9]+)?$ && $WARMUP =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
[[ $SIZE =~ ^[0-9]+$ && $ROUNDS =~ ^[1-9][0-9]*$ && $BURST =~ ^[1-9][0-9]*$ ]] || usage
((SIZE >= 60 && SIZE <= 1514)) || { echo "bench: --size must be 60..1514" >&2; exit 2; }
for t in ${TOOLS//,/ }; do
  [[ $t == @(pktgen|live|trafficgen|testpmd|trafgen) ]] ||
    { echo "bench: unknown tool $t (pktgen, live, trafficgen, testpmd, trafgen)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "bench: run as root (it creates network namespaces)" >&2; exit 1; }
(($(nproc) >= 2)) || echo "bench: warning: one CPU; sender and receiver share it" >&2

TRAFGEN=${TRAFGEN:-/usr/sbin/trafgen}
TESTPMD=${TESTPMD:-$(command -v dpdk-testpmd || echo /usr/bin/dpdk-testpmd)}
TRAFFICGEN=${TRAFFICGEN:-$(command -v xdp-trafficgen || echo /usr/sbin/xdp-trafficgen)}
if [[ -z ${PKTGEN:-} ]]; then
  echo "bench: building pktgen (release)…"
  cargo build --release --quiet --bin rawq-pktgen
  PKTGEN=$PWD/target/release/rawq-pktgen
fi

TX_CORE=0 RX_CORE=1
((RX_CORE < $(nproc))) || RX_CORE=0
TAG=$$
NSA=rawq-bench-$TAG-a NSB=rawq-bench-$TAG-b
VA=rqbn${TAG}a VB=rqbn${TAG}b
VA=${VA:0:15} VB=${VB:0:15}
IPA=10.203.252.1 IPB=10.203.252.2
OUT=$(mktemp -d)
RX=
cleanup() {
  # Stop whatever is still running (each wrapped in `timeout`, which passes the signal on).
  local p
  for p in $(jobs -p); do kill -INT "$p" 2>/dev/null || true; done
  for p in $(jobs -p); do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  ip netns del "$NSA" 2>/dev/null || true
  ip netns del "$NSB" 2>/dev/null || true
  rm -rf "/var/run/dpdk/rawq-bench-$TAG"; rmdir /var/run/dpdk 2>/dev/null || true
  if [[ -n ${BENCH_KEEP:-} ]]; then echo "bench: outputs kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NSA"
ip netns add "$NSB"
for ns in "$NSA" "$NSB"; do
  # No IPv6: no router solicitations or DAD frames in the counted window.
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    2>/dev/null || true
  ip -n "$ns" link set lo up
done
ip link add "$VA" netns "$NSA" type veth peer name "$VB" netns "$NSB"
ip -n "$NSA" addr add $IPA/24 dev "$VA"
ip -n "$NSB" addr add $IPB/24 dev "$VB"
ip -n "$NSA" link set "$VA" up
ip -n "$NSB" link set "$VB" up
MACA=$(ip -n "$NSA" -br link show "$VA" | awk '{print $3}')
MACB=$(ip -n "$NSB" -br link show "$VB" | awk '{print $3}')

# Per tool: startup (testpmd builds a mempool) + warm-up + window + slack, and the whole run.
TOOL_BOUND=$(awk -v w="$WARMUP" -v s="$SECS" 'BEGIN { printf "%d", w + s + 40 }')
NTOOLS=$(tr ',' '\n' <<<"$TOOLS" | grep -c .)
RX_BOUND=$((TOOL_BOUND * NTOOLS * ROUNDS + 30))

# Receiver: XDP_DROP for every frame; its user-space thread naps when idle, on the other core.
ip netns exec "$NSB" "$PKTGEN" -b xdp -d "$VB" --rx --rule 'promiscuous -> drop' --cores $RX_CORE \
  -t "$RX_BOUND" --quiet --json >"$OUT/rx.json" 2>"$OUT/rx.err" &
RX=$!
for _ in $(seq 50); do
  ip -n "$NSB" link show "$VB" | grep -q 'prog/xdp' && break
  kill -0 $RX 2>/dev/null || break
  sleep 0.1
done
ip -n "$NSB" link show "$VB" | grep -q 'prog/xdp' \
  || { echo "bench: the XDP_DROP receiver did not start:" >&2; cat "$OUT/rx.err" >&2; exit 1; }

drops() { ip netns exec "$NSB" ethtool -S "$VB" | awk '$1 == "rx_queue_0_xdp_drops:" { print $2 }'; }
xbytes() { ip netns exec "$NSB" ethtool -S "$VB" | awk '$1 == "rx_queue_0_xdp_bytes:" { print $2 }'; }
now() { date +%s.%N; }
# sleep in the background: a signal then runs the trap at once instead of after the sleep.
nap() { sleep "$1" & wait $!; }
[[ -n $(drops) ]] || { echo "bench: no rx_queue_0_xdp_drops counter on $VB (ethtool -S)" >&2; exit 1; }

# trafgen: the same UDP/IPv4 frame pktgen sends (eth 14 + ip 20 + udp 8 + payload), no FCS.
cat >"$OUT/trafgen.cfg" <<EOF
{ eth(da=$MACB, sa=$MACA, type=0x0800),
  ipv4(saddr=$IPA, daddr=$IPB, ttl=64),
  udp(sport=1024, dport=9000),
  fill(0x00, $((SIZE - 42))) }
EOF

# xdp-trafficgen: can it run here? A 1000-frame run; on failure its own words are the reason.
TRAFFICGEN_SKIP=
if [[ ,$TOOLS, == *,trafficgen,* ]]; then
  if [[ ! -x $TRAFFICGEN ]]; then
    TRAFFICGEN_SKIP="$TRAFFICGEN not found"
  elif ! timeout -s INT -k 5 20 ip netns exec "$NSA" "$TRAFFICGEN" udp -n 1000 -m "$MACB" "$VA" \
      >"$OUT/trafficgen-probe.out" 2>&1; then
    TRAFFICGEN_SKIP="xdp-trafficgen $(dpkg-query -W -f '${Version}' xdp-tools 2>/dev/null) cannot run on Linux $(uname -r): $(grep -v '^ *$' "$OUT/trafficgen-probe.out" | tail -n 4 | tr -s ' \n' ' ')"
    if grep -q "kernel BTF type ID of 'xdp_redirect_map_err'" "$OUT/trafficgen-probe.out"; then
      TRAFFICGEN_SKIP+="(its statistics object attaches to the tracepoint xdp:xdp_redirect_map_err, which Linux 6.16 removed: see /sys/kernel/tracing/events/xdp/; xdp-tools 1.5.6 and later no longer use it)"
    fi
  fi
  [[ -z $TRAFFICGEN_SKIP ]] || echo "bench: trafficgen skipped: $TRAFFICGEN_SKIP" >&2
fi

# Starts one sender in the background (pid in SENDER); its output goes to $OUT/<tool>.{out,err}.
start_sender() {
  local tool=$1
  case $tool in
    pktgen)
      timeout -s INT -k 5 "$TOOL_BOUND" ip netns exec "$NSA" taskset -c $TX_CORE "$PKTGEN" \
        -b xdp -d "$VA" --dst-mac "$MACB" --src-ip $IPA --dst-ip $IPB -s "$SIZE" -r max \
        --queues 1 --cores $TX_CORE --burst "$BURST" --json --quiet \
        >"$OUT/$tool.out" 2>"$OUT/$tool.err" &
      ;;
    live)
      timeout -s INT -k 5 "$TOOL_BOUND" ip netns exec "$NSA" taskset -c $TX_CORE "$PKTGEN" \
        -b xdp --engine live -d "$VA" --dst-mac "$MACB" --src-ip $IPA --dst-ip $IPB -s "$SIZE" \
        -r max --queues 1 --cores $TX_CORE --json --quiet \
        >"$OUT/$tool.out" 2>"$OUT/$tool.err" &
      ;;
    trafficgen)
      # -t 1: one thread, which xdp-trafficgen pins to core 0 (= TX_CORE).
      timeout -s INT -k 5 "$TOOL_BOUND" ip netns exec "$NSA" taskset -c $TX_CORE "$TRAFFICGEN" \
        udp -t 1 -m "$MACB" "$VA" \
        >"$OUT/$tool.out" 2>"$OUT/$tool.err" &
      ;;
    trafgen)
      # -P 1: one sender process; -Q: leave IRQ affinities alone. It cannot tune the host's
      # socket memory from inside a namespace (it says so and carries on).
      timeout -s INT -k 5 "$TOOL_BOUND" ip netns exec "$NSA" taskset -c $TX_CORE "$TRAFGEN" \
        -o "$VA" -i "$OUT/trafgen.cfg" -P 1 -Q \
        >"$OUT/$tool.out" 2>"$OUT/$tool.err" &
      ;;
    testpmd)
      # Forwarding lcore = the sender core; the main lcore only prints stats on the other one.
      timeout -s INT -k 5 "$TOOL_BOUND" ip netns exec "$NSA" "$TESTPMD" \
        -l $TX_CORE,$RX_CORE --main-lcore $RX_CORE --no-pci --no-huge -m 512 --no-shconf \
        --file-prefix "rawq-bench-$TAG" --log-level=lib.eal:error \
        --vdev "net_af_xdp0,iface=$VA,start_queue=0,queue_count=1" -- \
        --forward-mode=txonly --txpkts="$SIZE" --burst="$BURST" --eth-peer="0,$MACB" \
        --tx-ip="$IPA,$IPB" --txq=1 --rxq=1 --total-num-mbufs=16384 \
        --auto-start --stats-period 1 </dev/null \
        >"$OUT/$tool.out" 2>"$OUT/$tool.err" &
      ;;
  esac
  SENDER=$!
}

# What the tool says it did: packets per second over its own run (or its last 1 s figure).
self_rate() {
  local tool=$1
  case $tool in
    pktgen | live)
      python3 -c 'import json,sys; print("%.3f" % (json.load(open(sys.argv[1]))["pps"] / 1e6))' \
        "$OUT/$tool.out" 2>/dev/null || echo "?"
      ;;
    trafficgen) echo "?" ;;
    trafgen)
      # "N packets outgoing" and "S sec, U usec on CPU0 (N packets)"
      cat "$OUT/trafgen.out" "$OUT/trafgen.err" | tr '\r' '\n' |
        awk '/packets outgoing/ { p = $1 } / sec, .* usec on CPU/ { t += $1 + $3 / 1e6 }
             END { if (p && t) printf "%.3f\n", p / t / 1e6; else print "?" }'
      ;;
    testpmd)
      # The last once-a-second Tx-pps that the forwarding was still running for.
      tr -d '\033' <"$OUT/testpmd.out" | awk '/Tx-pps:/ { if ($2 > 0) v = $2 }
           END { if (v) printf "%.3f\n", v / 1e6; else print "?" }'
      ;;
  esac
}

# The sender's busiest thread (of the tool's processes under the `timeout` wrapper) and its CPU
# time in clock ticks (user + system; softirq time is accounted apart, so the XDP_DROP work that
# runs in softirq on the sender core does not count here).
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
ticks() { sed 's/.*) //' "$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; }
busiest_task() {
  # By CPU used over a short sample, not since start: testpmd's main lcore accumulates more
  # during EAL setup than its forwarding lcore does in the first second.
  local p t
  declare -A before=()
  local tasks=()
  for p in $(descendants "$SENDER"); do
    for t in /proc/"$p"/task/*; do tasks+=("$t"); before[$t]=$(ticks "$t"); done
  done
  sleep 0.5
  for t in "${tasks[@]}"; do echo "$(($(ticks "$t") - ${before[$t]:-0})) $t"; done |
    sort -n | tail -n 1 | cut -d' ' -f2
}
HZ=$(getconf CLK_TCK)

# Runs one tool; sets RESULT to "Mpps-at-receiver self-reported-Mpps frame-bytes core-share
# sender-cpu-µs-per-packet" (n/a where unknown). Not in a subshell, so that the cleanup trap sees
# a running sender.
measure() {
  local tool=$1 bin
  case $tool in
    pktgen | live) bin=$PKTGEN ;;
    trafficgen) bin=$TRAFFICGEN ;;
    trafgen) bin=$TRAFGEN ;;
    testpmd) bin=$TESTPMD ;;
    *) echo "bench: unknown tool $tool" >&2; exit 2 ;;
  esac
  RESULT="n/a n/a n/a n/a n/a"
  if [[ $tool == trafficgen && -n $TRAFFICGEN_SKIP ]]; then
    return
  fi
  if [[ ! -x $bin ]]; then
    echo "bench: $tool: $bin not found" >&2
    return
  fi
  local d0 d1 b0 b1 t0 t1 c0 c1 task ok=0
  d0=$(drops)
  start_sender "$tool"
  # Wait for the first frames (testpmd takes a few seconds to set up), then warm up.
  for _ in $(seq 300); do
    (($(drops) - d0 > 1000)) && { ok=1; break; }
    kill -0 "$SENDER" 2>/dev/null || break
    sleep 0.1
  done
  if ((!ok)); then
    kill -INT "$SENDER" 2>/dev/null || true
    wait "$SENDER" 2>/dev/null || true
    echo "bench: $tool: no frames arrived; its output:" >&2
    tail -n 20 "$OUT/$tool.out" "$OUT/$tool.err" >&2
    return
  fi
  nap "$WARMUP"
  task=$(busiest_task)
  t0=$(now) d0=$(drops) b0=$(xbytes) c0=$(ticks "$task")
  nap "$SECS"
  t1=$(now) d1=$(drops) b1=$(xbytes) c1=$(ticks "$task")
  kill -0 "$SENDER" 2>/dev/null || echo "bench: $tool: stopped before the window ended" >&2
  kill -INT "$SENDER" 2>/dev/null || true
  wait "$SENDER" 2>/dev/null || true
  sleep 0.5 # let the kernel finish with the last frames before the next tool
  # The veth's XDP byte counter starts at the IP header for frames that came as socket buffers:
  # + 14 for the Ethernet header. Frames redirected by XDP (live, trafficgen) arrive as XDP
  # frames, counted whole.
  local hdr=14
  [[ $tool == @(live|trafficgen) ]] && hdr=0
  RESULT=$(awk -v n=$((d1 - d0)) -v b=$((b1 - b0)) -v t0="$t0" -v t1="$t1" -v s="$(self_rate "$tool")" \
    -v hdr=$hdr \
    -v c0="${c0:-}" -v c1="${c1:-}" -v hz="$HZ" 'BEGIN {
      cpu = (c0 != "" && c1 != "") ? (c1 - c0) / hz : -1
      printf "%.3f %s %.1f ", n / (t1 - t0) / 1e6, s, n ? b / n + hdr : 0
      if (cpu >= 0 && n) printf "%.0f%% %.3f\n", 100 * cpu / (t1 - t0), cpu * 1e6 / n
      else print "n/a n/a" }')
}

echo "bench: $NSA/$VA -> $NSB/$VB (XDP_DROP), ${SIZE}-byte frames, sender on core $TX_CORE," \
  "warm-up ${WARMUP} s, window ${SECS} s, ${ROUNDS} round(s)"
echo "bench: load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
declare -A RES CPU
printf '\n%-8s %5s %9s %11s %6s %6s %13s\n' tool round "Mpps(rx)" "Mpps(self)" frame core "cpu us/pkt"
for ((r = 1; r <= ROUNDS; r++)); do
  # The tools take turns: each round starts one further along the list.
  for ((k = 0; k < ${#TOOL_LIST[@]}; k++)); do
    tool=${TOOL_LIST[$(((k + r - 1) % ${#TOOL_LIST[@]}))]}
    measure "$tool"
    read -r mpps self frame core cpu <<<"$RESULT"
    RES[$tool]+="$mpps " CPU[$tool]+="$cpu "
    printf '%-8s %5d %9s %11s %6s %6s %13s\n' "$tool" "$r" "$mpps" "$self" "$frame" "$core" "$cpu"
  done
done
echo "bench: load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

numbers() { tr ' ' '\n' | awk '/^[0-9.]+$/' | sort -g; }
median() { numbers | awk '{ v[NR] = $1 } END { if (!NR) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]
  else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { numbers | awk '{ v = $1 } END { print NR ? v : "n/a" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a" }'; }
declare -A MED BEST CMED
for tool in pktgen live trafficgen testpmd trafgen; do
  MED[$tool]=$(median <<<"${RES[$tool]:-}")
  BEST[$tool]=$(best <<<"${RES[$tool]:-}")
  CMED[$tool]=$(median <<<"${CPU[$tool]:-}")
done
echo
printf '%-24s %10s %10s %13s %15s %15s\n' tool "Mpps(rx)" "best" "cpu us/pkt" "rawq/testpmd" "rawq/trafgen"
declare -A name=([pktgen]="rawq pktgen (AF_XDP)" [live]="rawq pktgen --engine live"
  [trafficgen]="xdp-trafficgen" [testpmd]="dpdk-testpmd net_af_xdp" [trafgen]="trafgen (netsniff-ng)")
for tool in pktgen live trafficgen testpmd trafgen; do
  printf '%-24s %10s %10s %13s' "${name[$tool]}" "${MED[$tool]}" "${BEST[$tool]}" "${CMED[$tool]}"
  if [[ $tool == pktgen ]]; then
    printf ' %15s %15s' "$(ratio "${MED[pktgen]}" "${MED[testpmd]}")" "$(ratio "${MED[pktgen]}" "${MED[trafgen]}")"
  fi
  echo
done
echo
echo "live engine: live/xdp-trafficgen $(ratio "${MED[live]}" "${MED[trafficgen]}")," \
  "live/AF_XDP pktgen $(ratio "${MED[live]}" "${MED[pktgen]}")," \
  "sender CPU per frame AF_XDP/live $(ratio "${CMED[pktgen]}" "${CMED[live]}")"
[[ -z $TRAFFICGEN_SKIP ]] || echo "xdp-trafficgen skipped: $TRAFFICGEN_SKIP"
echo "ratios of Mpps at the receiver$( ((ROUNDS == 1)) || echo ", medians over $ROUNDS rounds")."
echo "ratios of sender CPU per frame (the other way round, higher = rawq cheaper):" \
  "rawq/testpmd $(ratio "${CMED[testpmd]}" "${CMED[pktgen]}")," \
  "rawq/trafgen $(ratio "${CMED[trafgen]}" "${CMED[pktgen]}")"
echo "core = share of the sender core the sending thread got in the window (the rest went to" \
  "softirq work and to other processes on a shared machine)."
