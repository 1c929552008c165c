#!/usr/bin/env bash
# rawq demo: pktgen over AF_XDP on a veth pair between two throwaway network namespaces.
#
# Host A sends a sequence-stamped UDP flow to port 9000 with rawq; host B steers exactly that flow
# into rawq with a flow rule (an XDP program) and counts it, while ping between the same two hosts
# keeps working through the kernel. Everything is created here and removed on exit or Ctrl-C.
#
# Usage (as root): bash scripts/demo.sh [--backend xdp|dv] [--rate 100kpps] [--seconds 3] [--size 60]
# PKTGEN=/path/to/pktgen uses that binary instead of building one.
#
# --backend dv: host B's port is the emulated ConnectX (scripts/emu.sh --wire on B's veth end):
# rawq's mlx5 Direct Verbs backend receives the steered flow through libmlx5's objects and a
# flow rule, and B's address lives on the port's kernel netdev (a TAP, --netdev), which answers
# the ping as the kernel half of a bifurcated mlx5 port does.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE='' SECONDS_TX=3 SIZE=60 BACKEND=xdp
while (($#)); do
  case "$1" in
    --backend)
      BACKEND=${2:-}
      [[ $BACKEND == xdp || $BACKEND == dv ]] || { echo "demo: --backend is xdp or dv" >&2; exit 2; }
      shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --seconds) SECONDS_TX=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    *) echo "usage: $0 [--backend xdp|dv] [--rate R] [--seconds S] [--size N]" >&2; exit 2 ;;
  esac
done
# The emulated port bridges its wire in software (AF_PACKET, the device model in the
# receiver's process): a lower default rate that a busy two-core machine sustains.
[[ -n $RATE ]] || { [[ $BACKEND == dv ]] && RATE=20kpps || RATE=100kpps; }
[[ $(id -u) == 0 ]] || { echo "demo: run as root (it creates network namespaces)" >&2; exit 1; }

if [[ -z ${PKTGEN:-} ]]; then
  echo "demo: building pktgen (release)…"
  cargo build --release --quiet --all-features --bin rawq-pktgen
  PKTGEN=$PWD/target/release/rawq-pktgen
fi
if [[ $BACKEND == dv ]]; then
  # Built here, not inside emu.sh while the demo waits for the port's TAP to appear.
  echo "demo: building the emulated NIC (release, as emu.sh runs it)…"
  cargo build --release --quiet -p rawq-emu
fi

TAG=$$
NSA=rawq-demo-$TAG-a NSB=rawq-demo-$TAG-b
VA=rqdemo${TAG}a VB=rqdemo${TAG}b
VA=${VA:0:15} VB=${VB:0:15}
IPA=10.203.251.1 IPB=10.203.251.2
OUT=$(mktemp -d)
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  wait 2>/dev/null || true
  ip netns del "$NSA" 2>/dev/null || true
  ip netns del "$NSB" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NSA"
ip netns add "$NSB"
ip link add "$VA" netns "$NSA" type veth peer name "$VB" netns "$NSB"
ip -n "$NSA" addr add $IPA/24 dev "$VA"
ip -n "$NSB" addr add $IPB/24 dev "$VB"
for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
ip -n "$NSA" link set "$VA" up
ip -n "$NSB" link set "$VB" up
MACB=$(ip -n "$NSB" -br link show "$VB" | awk '{print $3}')
echo "demo: $NSA/$VA ($IPA) <-> $NSB/$VB ($IPB, $MACB)"

# Receiver: only UDP to port 9000 goes to rawq; everything else stays with B's kernel.
# A deep receive ring absorbs the receiver being descheduled on a busy two-core machine.
if [[ $BACKEND == xdp ]]; then
  ip netns exec "$NSB" "$PKTGEN" -b xdp -d "$VB" --rx --rule "udp dst-port 9000 -> queue 0" --ring 8192 \
    -t $((SECONDS_TX + 60)) --quiet --json >"$OUT/rx.json" 2>"$OUT/rx.err" &
  RX=$!
  # pktgen reports the port once it is open and its flow rule installed.
  for _ in $(seq 600); do
    grep -q "^pktgen: xdp on" "$OUT/rx.err" 2>/dev/null && break
    kill -0 $RX 2>/dev/null || break
    sleep 0.1
  done
else
  # The veth end is the emulated port's wire; B's address moves to the port's kernel netdev.
  TAP=rqdtap$TAG TAP=${TAP:0:15}
  ip -n "$NSB" addr flush dev "$VB"
  ip netns exec "$NSB" env RAWQ_EMU_STATS="$OUT/emu.stats" bash scripts/emu.sh --wire "$VB" --netdev "$TAP" -- \
    "$PKTGEN" -b dv -d mlx5_0 --rx --rule "udp dst-port 9000 -> queue 0" --ring 8192 \
    -t $((SECONDS_TX + 60)) --quiet --json >"$OUT/rx.json" 2>"$OUT/rx.err" &
  RX=$!
  for _ in $(seq 600); do
    ip -n "$NSB" link show dev "$TAP" >/dev/null 2>&1 && break
    kill -0 $RX 2>/dev/null || break
    sleep 0.1
  done
  ip -n "$NSB" addr add $IPB/24 dev "$TAP" || { cat "$OUT/rx.err" >&2; exit 1; }
  ip -n "$NSB" link set "$TAP" up
  MACB=$(ip -n "$NSB" -br link show "$TAP" | awk '{print $3}')
  echo "demo: $NSB's port is the emulated mlx5_0 on $VB; $IPB is on its kernel netdev $TAP ($MACB)"
  # pktgen reports the port once it is open and its flow rule installed.
  for _ in $(seq 600); do
    grep -q "^pktgen: dv on" "$OUT/rx.err" 2>/dev/null && break
    kill -0 $RX 2>/dev/null || break
    sleep 0.1
  done
  sleep 0.5
fi
kill -0 $RX 2>/dev/null || { cat "$OUT/rx.err" >&2; exit 1; }

# Ping across the same link for the whole run.
ip netns exec "$NSA" ping -q -c $((SECONDS_TX * 5 + 5)) -i 0.2 -W 1 $IPB >"$OUT/ping.txt" 2>&1 &
PING=$!

# The receiver's -t only bounds a demo gone wrong: it is stopped (SIGTERM, on which pktgen
# counts what its queue still holds) once its port has every frame sent, as counted below it:
# B's veth for AF_XDP (the kernel's rx_packets, ping's few frames included), the emulated
# port's own counters for dv.
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
stop_receiver() {
  local p
  for p in $RX $(descendants $RX); do
    [[ $(cat /proc/$p/comm 2>/dev/null) == rawq-pktgen ]] && kill -TERM "$p" 2>/dev/null
  done
  return 0
}
port_frames() {
  if [[ $BACKEND == xdp ]]; then
    ip netns exec "$NSB" cat /sys/class/net/"$VB"/statistics/rx_packets 2>/dev/null || echo 0
  else
    grep -oE ' rx_frames: [0-9]+' "$OUT/emu.stats" 2>/dev/null | tail -1 | grep -oE '[0-9]+' || echo 0
  fi
}
BASE=$(port_frames)

# Sender: a fixed number of packets at a steady rate, sequence-stamped.
COUNT=$(awk -v r="$RATE" -v s="$SECONDS_TX" 'BEGIN {
  m = 1; v = r; sub(/[a-zA-Z]+$/, "", v); u = substr(r, length(v) + 1)
  if (u ~ /^[kK]/) m = 1e3; else if (u ~ /^[mM]/) m = 1e6; print int(v * m * s) }')
ip netns exec "$NSA" "$PKTGEN" -b xdp -d "$VA" --dst-mac "$MACB" --src-ip $IPA --dst-ip $IPB \
  --dst-port 9000 -s "$SIZE" -r "$RATE" -n "$COUNT" --seq --json >"$OUT/tx.json" 2>"$OUT/tx.err" \
  || { cat "$OUT/tx.err" >&2; exit 1; }
for _ in $(seq 300); do
  (($(port_frames) - BASE >= COUNT)) && break
  kill -0 $RX 2>/dev/null || break
  sleep 0.1
done
# The ping runs past the sender; B's port (for dv, its netdev too) stays up until it ends.
wait $PING || true
stop_receiver
wait $RX || { cat "$OUT/rx.err" >&2; exit 1; }

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
TXP=$(field "$OUT/tx.json" packets) TXPPS=$(field "$OUT/tx.json" pps)
RXP=$(field "$OUT/rx.json" packets) GAPS=$(field "$OUT/rx.json" seq_gaps)
MODE=$(field "$OUT/tx.json" mode)
LOSS=$(grep -oE '[0-9.]+% packet loss' "$OUT/ping.txt" || echo "no ping result")
printf 'demo: sent     %s packets at %.0f pps (AF_XDP, %s mode)\n' "$TXP" "$TXPPS" "$MODE"
[[ $BACKEND == dv ]] && echo "demo: receiver: $(field "$OUT/rx.json" backend) on $(field "$OUT/rx.json" device) ($(field "$OUT/rx.json" mode))"
printf 'demo: received %s packets on the steered flow (%s missing by sequence number)\n' "$RXP" "$GAPS"
echo "demo: ping during the run: $LOSS"
if [[ $TXP == "$RXP" && $GAPS == 0 && $LOSS == "0% packet loss" ]]; then
  echo "RESULT: ok (sent = received, ping 0% loss)"
else
  echo "RESULT: MISMATCH"
  echo "sender:   $(cat "$OUT/tx.json")"
  echo "receiver: $(cat "$OUT/rx.json")"
  [[ -e $OUT/emu.stats ]] && echo "emulated port: $(cat "$OUT/emu.stats")"
  exit 1
fi
