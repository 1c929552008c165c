#!/usr/bin/env bash
# rawq bench: one queue on one core against two queues on two cores (one pinned thread a
# queue), rawq beside dpdk-testpmd on the same setup, in one run (issue 21, item 3). The figure
# is the scaling factor: Mpps with two queues / Mpps with one.
#
# Parts (--parts, default all four):
#   xdptx   AF_XDP on a veth with two queues a side (numtxqueues 2 numrxqueues 2), in namespaces
#           made here: `pktgen -b xdp --queues 1|2` against `dpdk-testpmd --vdev net_af_xdp`
#           txonly, 60-byte frames. Counted at the far side: the XDP_DROP receiver's counters
#           (ethtool -S rx_queue_N_xdp_drops of the peer), not what the sender says.
#   xdpfwd  io forwarding over AF_XDP: sender (namespace A, pktgen -b xdp, one thread a queue)
#           -> veth -> forwarder bridging two veths (namespace B) -> veth -> XDP_DROP receiver
#           (namespace C). `fwd -b xdp --mode io` against testpmd io on af_xdp. Counted at the
#           receiver (forwarded) and at the forwarder's input (offered: rx_queue_N_xdp_packets).
#   model   `pktgen -b model --queues 1|2`: the device model in the process, its sink wire
#           (pktgen's count is what the model took).
#   emu     the emulated ConnectX (scripts/emu.sh, looped-back port): `pktgen -b dv --queues 1|2`
#           against testpmd txonly with --txq/--rxq 1|2 (scripts/testpmd-emu.sh), counted by the
#           emulated device (RAWQ_EMU_STATS tx_frames over the window, by the file's mtime).
#
# Cores: a queue's thread on core i (--cores, default 0,1; the first for one queue). testpmd's
# main lcore sits on the last of --cores (it only prints once a second). What else runs there:
#   xdptx   the receiver's XDP_DROP runs in the sender's softirq (veth), on the sender's core.
#   xdpfwd  the sender's threads (--sender-cores, default: the same cores as the forwarder, one
#           sender thread beside each forwarding thread) and the veths' kernel work: the
#           forwarder's input (XDP redirect + copy into its umem) runs in the sender's softirq,
#           its output to the receiver's XDP_DROP in the forwarder's.
#   model   the model's device thread: pinned by pktgen to a CPU no queue uses if there is one,
#           else unpinned, competing with the queues.
#   emu     the emulator's device thread (one for the device, unpinned): it does the NIC's work
#           for both queues, on the same CPUs.
# With 2 CPUs nothing is free for any of that, so a factor below 2 is expected: the script
# prints `nproc`, the CPU model and the load average before and after. Pass --cores /
# --sender-cores on a bigger machine to give them CPUs of their own.
#
# Every configuration runs --rounds times, alternately (q1 q2 q1 q2 ..., rawq and testpmd
# interleaved), --warmup s after the first frames, then a --seconds window; the summary gives
# each median and spread (min-max) and the factor of the medians.
#
# Usage (as root): bash scripts/bench-scaling.sh [--seconds 3] [--warmup 1] [--rounds 3]
#     [--parts xdptx,xdpfwd,model,emu] [--cores 0,1] [--sender-cores LIST]
# With the defaults it takes about 5 minutes (42 runs of 5-10 s; 4.5 min on a 2-vCPU VM);
# --rounds 5 --seconds 10 for steadier figures on a quiet machine (about 12 minutes).
# PKTGEN, FWD, TESTPMD, RAWQ_EMU_LIB use those binaries instead of building; BENCH_KEEP=1 keeps
# every tool's output (path printed at exit).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SECS=3 WARMUP=1 ROUNDS=3 PARTS=xdptx,xdpfwd,model,emu CORES=0,1 SCORES=""
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --seconds) SECS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --parts) PARTS=${2:?}; shift 2 ;;
    --cores) CORES=${2:?}; shift 2 ;;
    --sender-cores) SCORES=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[[ $SECS =~ ^[0-9]+([.][0-9]+)?$ && $WARMUP =~ ^[0-9]+([.][0-9]+)?$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || usage
for p in ${PARTS//,/ }; do
  [[ $p == @(xdptx|xdpfwd|model|emu) ]] || { echo "bench: unknown part $p (xdptx, xdpfwd, model, emu)" >&2; exit 2; }
done
[[ $CORES =~ ^[0-9]+,[0-9]+$ ]] || { echo "bench: --cores takes two CPUs, e.g. 0,1" >&2; exit 2; }
SCORES=${SCORES:-$CORES}
[[ $SCORES =~ ^[0-9]+,[0-9]+$ ]] || { echo "bench: --sender-cores takes two CPUs, e.g. 2,3" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "bench: run as root (namespaces, AF_XDP, the emulated NIC's TAP)" >&2; exit 1; }
C0=${CORES%,*} C1=${CORES#*,} S0=${SCORES%,*}
cores_for() { if (($1 == 1)); then echo "$C0"; else echo "$CORES"; fi; }
scores_for() { if (($1 == 1)); then echo "$S0"; else echo "$SCORES"; fi; }
# testpmd's EAL lcore map: forwarding lcores 0..q-1 on the queues' cores, the main lcore (2)
# on the second core.
lcores_for() { if (($1 == 1)); then echo "0@$C0,2@$C1"; else echo "0@$C0,1@$C1,2@$C1"; fi; }

if [[ -z ${PKTGEN:-} || -z ${FWD:-} ]]; then
  echo "bench: building pktgen and fwd (release)…" >&2
  cargo build --release --quiet --bin rawq-pktgen --bin rawq-fwd
fi
PKTGEN=${PKTGEN:-$ROOT/target/release/rawq-pktgen}
FWD=${FWD:-$ROOT/target/release/rawq-fwd}
TESTPMD=${TESTPMD:-$(command -v dpdk-testpmd || echo /usr/bin/dpdk-testpmd)}
if [[ ,$PARTS, == *,emu,* && -z ${RAWQ_EMU_LIB:-} ]]; then
  echo "bench: building the emulator (release)…" >&2
  cargo build --release --quiet -p rawq-emu
  export RAWQ_EMU_LIB=$ROOT/target/release/librawq_emu.so
fi

TAG=$$
NSA=rawq-bsc-$TAG-a NSB=rawq-bsc-$TAG-b NSC=rawq-bsc-$TAG-c
VA=rqsc${TAG}a VB1=rqsc${TAG}b VB2=rqsc${TAG}d VC=rqsc${TAG}c
VA=${VA:0:15} VB1=${VB1:0:15} VB2=${VB2:0:15} VC=${VC:0:15}
OUT=$(mktemp -d)
NETNS=0
cleanup() {
  trap - EXIT
  local p
  for p in $(jobs -p); do kill -INT "$p" 2>/dev/null || true; done
  for p in $(jobs -p); do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if ((NETNS)); then
    ip netns del "$NSA" 2>/dev/null || true
    ip netns del "$NSB" 2>/dev/null || true
    ip netns del "$NSC" 2>/dev/null || true
  fi
  rm -rf "/var/run/dpdk/rawq-bsc-$TAG"
  if [[ -n ${BENCH_KEEP:-} ]]; then echo "bench: outputs kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
# sleep in the background: a signal then runs the trap at once.
nap() { sleep "$1" & wait $!; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), nproc $(nproc), $(uname -r)"
echo "load average at start: $(load)"
echo "cores: queues on $CORES (one queue: $C0); xdpfwd senders on $SCORES; window ${SECS} s after ${WARMUP} s warm-up, ${ROUNDS} round(s)"
(($(nproc) >= 4)) || echo "note: $(nproc) CPUs: the device / kernel / sender work of every part shares the queues' CPUs (see the header of $0)"

declare -A RES
# record KEY MPPS: one round's figure.
record() { RES[$1]+="$2 "; }
row() { printf '  %-34s %2s %5d %9s  %s\n' "$@"; }

# ---------------------------------------------------------------- AF_XDP on veths
# A (VA) ---- (VB1) B (VB2) ---- (VC) C; two queues each way on every veth. The XDP_DROP
# receiver on VC counts everything that arrives (rx_queue_N_xdp_drops).
setup_netns() {
  NETNS=1
  local ns
  for ns in "$NSA" "$NSB" "$NSC"; do
    ip netns add "$ns"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
      2>/dev/null || true
    ip -n "$ns" link set lo up
  done
  ip link add name "$VA" netns "$NSA" numtxqueues 2 numrxqueues 2 type veth \
    peer name "$VB1" netns "$NSB" numtxqueues 2 numrxqueues 2
  ip link add name "$VB2" netns "$NSB" numtxqueues 2 numrxqueues 2 type veth \
    peer name "$VC" netns "$NSC" numtxqueues 2 numrxqueues 2
  ip -n "$NSA" link set dev "$VA" up
  ip -n "$NSB" link set dev "$VB1" up
  ip -n "$NSB" link set dev "$VB2" up
  ip -n "$NSC" link set dev "$VC" up
  MACB1=$(ip -n "$NSB" -br link show dev "$VB1" | awk '{print $3}')
  MACC=$(ip -n "$NSC" -br link show dev "$VC" | awk '{print $3}')
  # The receiver: XDP_DROP for every frame; its user-space thread naps when idle.
  ip netns exec "$NSC" "$PKTGEN" -b xdp -d "$VC" --rx --rule 'promiscuous -> drop' --cores "$C1" \
    -t 100000 --quiet >"$OUT/rx.out" 2>"$OUT/rx.err" &
  RXPID=$!
  for _ in $(seq 100); do
    ip -n "$NSC" link show dev "$VC" | grep -q 'xdp' && break
    kill -0 $RXPID 2>/dev/null || break
    sleep 0.1
  done
  ip -n "$NSC" link show dev "$VC" | grep -q 'xdp' ||
    { echo "bench: the XDP_DROP receiver did not start:" >&2; cat "$OUT/rx.err" >&2; exit 1; }
}
# "q0 q1" of an ethtool -S counter rx_queue_N_$3 of interface $2 in namespace $1.
qcount() {
  ip netns exec "$1" ethtool -S "$2" | awk -v k="$3" '
    $1 == "rx_queue_0_" k ":" { a = $2 } $1 == "rx_queue_1_" k ":" { b = $2 } END { print a + 0, b + 0 }'
}
arrived() { qcount "$NSC" "$VC" xdp_drops; }
sum2() { echo $(($1 + $2)); }

# Waits for frames at the receiver (a started tool $1 must keep running), warms up, counts
# over the window; sets MPPS, SPLIT_Q ("q0/q1 share") and OFFERED (the forwarder's input, for
# xdpfwd). Returns 1 when nothing arrived.
xdp_window() {
  local pid=$1 d0 d1 i0 i1 t0 t1 ok=0 a b c d
  read -r a b <<<"$(arrived)"
  d0=$((a + b))
  for _ in $(seq 300); do
    read -r a b <<<"$(arrived)"
    ((a + b - d0 > 1000)) && { ok=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  ((ok)) || return 1
  nap "$WARMUP"
  read -r a b <<<"$(arrived)"
  read -r c d <<<"$(qcount "$NSB" "$VB1" xdp_packets)"
  t0=$(now)
  nap "$SECS"
  local a1 b1 c1 d1
  read -r a1 b1 <<<"$(arrived)"
  read -r c1 d1 <<<"$(qcount "$NSB" "$VB1" xdp_packets)"
  t1=$(now)
  kill -0 "$pid" 2>/dev/null || echo "bench: the tool stopped before the window ended" >&2
  read -r MPPS SPLIT_Q OFFERED < <(awk -v a=$((a1 - a)) -v b=$((b1 - b)) -v o=$((c1 - c + d1 - d)) \
    -v t0="$t0" -v t1="$t1" 'BEGIN {
      n = a + b
      printf "%.3f %s %.3f\n", n / (t1 - t0) / 1e6, n ? sprintf("%.0f/%.0f", 100 * a / n, 100 * b / n) : "-",
        o / (t1 - t0) / 1e6 }')
}

# Stops a background tool started under `timeout -s INT` (one SIGINT, as testpmd 22.11 wants).
stop() {
  kill -INT "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

BOUND=$(awk -v w="$WARMUP" -v s="$SECS" 'BEGIN { printf "%d", w + s + 60 }')
# testpmd on AF_XDP: the vdevs (one a queue: DPDK 22.11's af_xdp PMD takes its queue count
# from ETHTOOL_GCHANNELS' combined count, which veth does not report, so it refuses
# queue_count=2 on a veth: "Specified queue count 2 is larger than combined queue count 1").
testpmd_xdp() { # namespace, q, forward mode, vdev..., then -- testpmd args
  local ns=$1 q=$2 mode=$3
  shift 3
  local vdevs=()
  while [[ $1 != -- ]]; do vdevs+=(--vdev "$1"); shift; done
  shift
  # exec: the caller's $! is then timeout's pid, which passes one SIGINT on to testpmd (a
  # subshell would hold the signal until its child ended).
  exec timeout -s INT -k 5 "$BOUND" ip netns exec "$ns" "$TESTPMD" --lcores "$(lcores_for "$q")" \
    --main-lcore 2 --no-pci --no-huge -m 1024 --no-shconf --file-prefix "rawq-bsc-$TAG" \
    --log-level=lib.eal:error "${vdevs[@]}" -- --forward-mode="$mode" --nb-cores="$q" \
    --burst=32 --rxd=2048 --txd=2048 --total-num-mbufs=32768 --auto-start --stats-period 1 "$@" \
    </dev/null
}

xdptx_run() { # tool q round
  local tool=$1 q=$2 r=$3 pid
  if [[ $tool == rawq ]]; then
    timeout -s INT -k 5 "$BOUND" ip netns exec "$NSB" "$PKTGEN" -b xdp -d "$VB2" --dst-mac "$MACC" \
      -s 60 -r max --queues "$q" --cores "$(cores_for "$q")" --quiet \
      >"$OUT/xdptx-$tool-$q-$r.out" 2>&1 &
  else
    local v=("net_af_xdp0,iface=$VB2,start_queue=0,queue_count=1")
    ((q == 2)) && v+=("net_af_xdp1,iface=$VB2,start_queue=1,queue_count=1")
    testpmd_xdp "$NSB" "$q" txonly "${v[@]}" -- --txpkts=60 --eth-peer="0,$MACC" \
      --eth-peer="1,$MACC" >"$OUT/xdptx-$tool-$q-$r.out" 2>&1 &
  fi
  pid=$!
  if xdp_window $pid; then
    record "xdptx/$tool/$q" "$MPPS"
    row "AF_XDP txonly, $tool" "q$q" "$r" "$MPPS" "at the receiver, queues $SPLIT_Q %"
  else
    echo "bench: xdptx $tool q$q: no frames arrived; its output:" >&2
    tail -n 15 "$OUT/xdptx-$tool-$q-$r.out" >&2
  fi
  stop $pid
  sleep 0.5
}

xdpfwd_run() { # tool q round
  local tool=$1 q=$2 r=$3 fpid spid
  if [[ $tool == rawq ]]; then
    timeout -s INT -k 5 "$BOUND" ip netns exec "$NSB" "$FWD" -b xdp -d "$VB1" -d "$VB2" --mode io \
      --queues "$q" --cores "$(cores_for "$q")" --ring 2048 --quiet --json \
      --rule 'udp dst-port 9000 -> queue 0' >"$OUT/xdpfwd-$tool-$q-$r.out" 2>&1 &
  else
    # Ports in pairs (0,1), (2,3): queue i of VB1 with queue i of VB2, one pair per lcore.
    local v=("net_af_xdp0,iface=$VB1,start_queue=0,queue_count=1" "net_af_xdp1,iface=$VB2,start_queue=0,queue_count=1")
    ((q == 2)) && v+=("net_af_xdp2,iface=$VB1,start_queue=1,queue_count=1" "net_af_xdp3,iface=$VB2,start_queue=1,queue_count=1")
    testpmd_xdp "$NSB" "$q" io "${v[@]}" -- --port-topology=paired \
      >"$OUT/xdpfwd-$tool-$q-$r.out" 2>&1 &
  fi
  fpid=$!
  # The forwarder is ready when both its interfaces have an XDP program.
  local ok=0
  for _ in $(seq 300); do
    if ip -n "$NSB" link show dev "$VB1" | grep -q xdp && ip -n "$NSB" link show dev "$VB2" | grep -q xdp; then
      ok=1; break
    fi
    kill -0 $fpid 2>/dev/null || break
    sleep 0.1
  done
  if ((!ok)); then
    echo "bench: xdpfwd $tool q$q: the forwarder did not start:" >&2
    tail -n 15 "$OUT/xdpfwd-$tool-$q-$r.out" >&2
    stop $fpid
    return
  fi
  [[ $tool == testpmd ]] && sleep 1 # its ports are started after the programs are attached
  timeout -s INT -k 5 "$BOUND" ip netns exec "$NSA" "$PKTGEN" -b xdp -d "$VA" --dst-mac "$MACB1" \
    -s 60 -r max --flows 64 --queues "$q" --cores "$(scores_for "$q")" --quiet \
    >"$OUT/xdpfwd-sender-$tool-$q-$r.out" 2>&1 &
  spid=$!
  if xdp_window $spid; then
    record "xdpfwd/$tool/$q" "$MPPS"
    RES["xdpfwd-offered/$tool/$q"]+="$OFFERED "
    row "AF_XDP io forwarding, $tool" "q$q" "$r" "$MPPS" "forwarded (at the receiver, queues $SPLIT_Q %), offered $OFFERED Mpps"
  else
    echo "bench: xdpfwd $tool q$q: nothing forwarded; outputs:" >&2
    tail -n 15 "$OUT/xdpfwd-$tool-$q-$r.out" "$OUT/xdpfwd-sender-$tool-$q-$r.out" >&2
  fi
  stop $spid
  stop $fpid
  sleep 0.5
}

# ---------------------------------------------------------------- device model, emulated NIC
model_run() { # q round
  local q=$1 r=$2 f=$OUT/model-$1-$2
  local t
  t=$(awk -v w="$WARMUP" -v s="$SECS" 'BEGIN { print w + s }')
  if "$PKTGEN" -b model -s 60 -t "$t" --queues "$q" --cores "$(cores_for "$q")" --json --quiet \
    >"$f.json" 2>"$f.err"; then
    MPPS=$(python3 -c 'import json,sys; print("%.3f" % (json.load(open(sys.argv[1]))["pps"] / 1e6))' "$f.json")
    record "model/rawq/$q" "$MPPS"
    row "model, rawq pktgen" "q$q" "$r" "$MPPS" "what the model took, over pktgen's whole ${t} s"
  else
    echo "bench: model q$q failed: $(tail -n 3 "$f.err")" >&2
  fi
}

# "mtime_ns tx_frames" of the emulator's counters file $1 (rewritten twice a second).
emu_sample() {
  python3 - "$1" <<'EOF'
import os, re, sys, time
for _ in range(100):
    try:
        st = os.stat(sys.argv[1]); m = re.search(r'tx_frames: (\d+)', open(sys.argv[1]).read())
        if m and os.stat(sys.argv[1]).st_mtime_ns == st.st_mtime_ns:
            print(st.st_mtime_ns, m[1]); break
    except OSError:
        pass
    time.sleep(0.02)
else:
    print("0 0")
EOF
}

emu_run() { # tool q round
  local tool=$1 q=$2 r=$3 f=$OUT/emu-$1-$2-$3 pid
  rm -f "$f.stats"
  if [[ $tool == rawq ]]; then
    RAWQ_EMU_STATS=$f.stats bash scripts/emu.sh -- "$PKTGEN" -b dv -d mlx5_0 -s 60 --ring 2048 --queues "$q" \
      --cores "$(cores_for "$q")" --quiet >"$f.out" 2>&1 &
  else
    RAWQ_EMU_STATS=$f.stats DPDK_TESTPMD=$TESTPMD bash scripts/testpmd-emu.sh --lcores "$(lcores_for "$q")" \
      --eal --main-lcore=2 -- --forward-mode=txonly --txpkts=60 --burst=32 --txd=2048 --rxd=2048 --txq="$q" --rxq="$q" \
      --nb-cores="$q" --total-num-mbufs=32768 --auto-start --stats-period 1 </dev/null >"$f.out" 2>&1 &
  fi
  pid=$!
  local ok=0 m0 f0 m1 f1
  for _ in $(seq 300); do
    read -r m0 f0 <<<"$( [[ -s $f.stats ]] && emu_sample "$f.stats" || echo "0 0")"
    ((f0 > 1000)) && { ok=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if ((ok)); then
    nap "$WARMUP"
    read -r m0 f0 <<<"$(emu_sample "$f.stats")"
    nap "$SECS"
    read -r m1 f1 <<<"$(emu_sample "$f.stats")"
    kill -0 $pid 2>/dev/null || echo "bench: emu $tool q$q stopped before the window ended" >&2
    MPPS=$(awk -v n=$((f1 - f0)) -v t=$((m1 - m0)) 'BEGIN { printf "%.3f", (t > 0 ? n / t * 1e3 : 0) }')
    record "emu/$tool/$q" "$MPPS"
    row "emulated NIC txonly, $tool" "q$q" "$r" "$MPPS" "the device's tx_frames over $(awk -v t=$((m1 - m0)) 'BEGIN { printf "%.2f", t / 1e9 }') s"
  else
    echo "bench: emu $tool q$q: the device sent nothing; its output:" >&2
    tail -n 15 "$f.out" >&2
  fi
  # One SIGTERM to the wrapper's pid only (testpmd 22.11 must not get a second signal).
  kill -TERM $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  [[ -s $f.stats ]] && echo "      device counters at the end: $(grep -o 'tx_frames: [0-9]*\|wire_drops: [0-9]*\|rx_frames: [0-9]*\|rx_no_buffer: [0-9]*\|rx_to_kernel: [0-9]*' "$f.stats" | tr '\n' ' ')"
}

# ---------------------------------------------------------------- the runs, alternating
printf '\n  %-34s %2s %5s %9s  %s\n' configuration q round Mpps "counted by"
for part in ${PARTS//,/ }; do
  case $part in
    xdptx | xdpfwd) ((NETNS)) || setup_netns ;;
  esac
  for ((r = 1; r <= ROUNDS; r++)); do
    case $part in
      xdptx) for c in "rawq 1" "testpmd 1" "rawq 2" "testpmd 2"; do xdptx_run $c $r; done ;;
      xdpfwd) for c in "rawq 1" "testpmd 1" "rawq 2" "testpmd 2"; do xdpfwd_run $c $r; done ;;
      model) for q in 1 2; do model_run $q $r; done ;;
      emu) for c in "rawq 1" "testpmd 1" "rawq 2" "testpmd 2"; do emu_run $c $r; done ;;
    esac
  done
done
echo "load average at end: $(load)"

# ---------------------------------------------------------------- summary
stats() { # numbers on stdin -> "median min max" (n/a when none)
  tr ' ' '\n' | awk '/^[0-9.]+$/' | sort -g | awk '{ v[NR] = $1 } END {
    if (!NR) { print "n/a n/a n/a"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}
echo
printf '%-40s %22s %22s %8s\n' "Mpps: median (min-max)" "1 queue, 1 core" "2 queues, 2 cores" factor
declare -A label=([xdptx/rawq]="AF_XDP txonly: rawq pktgen" [xdptx/testpmd]="AF_XDP txonly: testpmd af_xdp"
  [xdpfwd/rawq]="AF_XDP io fwd: rawq fwd" [xdpfwd/testpmd]="AF_XDP io fwd: testpmd af_xdp"
  [model/rawq]="model: rawq pktgen -b model"
  [emu/rawq]="emulated NIC: rawq pktgen -b dv" [emu/testpmd]="emulated NIC: testpmd mlx5")
for k in xdptx/rawq xdptx/testpmd xdpfwd/rawq xdpfwd/testpmd model/rawq emu/rawq emu/testpmd; do
  [[ -n ${RES[$k/1]:-}${RES[$k/2]:-} ]] || continue
  read -r m1 lo1 hi1 <<<"$(stats <<<"${RES[$k/1]:-}")"
  read -r m2 lo2 hi2 <<<"$(stats <<<"${RES[$k/2]:-}")"
  printf '%-40s %22s %22s %8s\n' "${label[$k]}" "$m1 ($lo1-$hi1)" "$m2 ($lo2-$hi2)" \
    "$(awk -v a="$m2" -v b="$m1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a" }')"
done
for k in xdpfwd-offered/rawq xdpfwd-offered/testpmd; do
  [[ -n ${RES[$k/1]:-}${RES[$k/2]:-} ]] || continue
  read -r m1 _ _ <<<"$(stats <<<"${RES[$k/1]:-}")"
  read -r m2 _ _ <<<"$(stats <<<"${RES[$k/2]:-}")"
  echo "  offered to the forwarder (${k#*/}): $m1 / $m2 Mpps (what reached its XDP programs)"
done
echo "factor = median with 2 queues on 2 cores / median with 1 queue on 1 core; Mpps counted at the receiver (AF_XDP), by the device (emulated NIC) or the model."
