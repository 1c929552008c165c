#!/usr/bin/env bash
# rawq bench: fwd's forwarding rate per core and its two-queue scaling, on the device model and
# on AF_XDP over a two-queue veth (docs/performance.md "fwd's forwarding rate" gives the figures and the machine).
#
# model: one looped-back port (`-b model`); `fwd --tx-first 1024` puts 1024 frames in the
#   loop and forwards them round (io mode) for the window, one queue pair on core 0, then two
#   queue pairs on cores 0 and 1. The model's device thread runs beside fwd (on the CPU no
#   forwarding thread is pinned to, when there is one): on a two-core machine the two-queue
#   run shares both CPUs with it, so it shows what is left, not fwd's ceiling.
# veth: two throwaway namespaces joined by a veth pair with two queues a side; pktgen sends
#   60-byte UDP frames (64 flows) at full speed from as many queues as fwd has, fwd reflects
#   them (macswap) with one pinned thread per queue pair. On a two-core machine sender and
#   forwarder share the CPUs too: the figure is the forwarded rate under that load.
#
# The rate is fwd's own count of frames forwarded (its --json summary) over the window: fwd's
# run on the model, the sender's on the veth; every loss is in the same summary and printed
# beside it. On a shared machine the figures swing with the load (printed in the header).
#
# Usage (as root): bash scripts/bench-fwd.sh [--seconds 5] [--parts model,veth]
# FWD=/path/to/fwd and PKTGEN=/path/to/pktgen use those binaries instead of building them.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=5 PARTS=model,veth
usage() {
  echo "usage: $0 [--seconds S] [--parts model,veth]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --seconds) SECS=${2:?}; shift 2 ;;
    --parts) PARTS=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[[ $SECS =~ ^[1-9][0-9]*$ ]] || usage
if [[ -z ${FWD:-} || -z ${PKTGEN:-} ]]; then
  echo "bench: building fwd and pktgen (release)…" >&2
  cargo build --release --quiet --bin rawq-fwd --bin rawq-pktgen
fi
FWD=${FWD:-$PWD/target/release/rawq-fwd}
PKTGEN=${PKTGEN:-$PWD/target/release/rawq-pktgen}
NCPU=$(nproc)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $NCPU CPU(s), $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# "Mpps forwarded, losses" from a fwd --json summary on stdin, over $1 seconds (default: fwd's
# whole run).
summary() {
  python3 -c '
import json, sys
v = json.load(sys.stdin)
t = float(sys.argv[1]) if len(sys.argv) > 1 else v["elapsed_s"]
lost = {}
for p in v["ports"]:
    for k, x in p["drops"].items():
        if isinstance(x, dict):
            for k2, y in x.items():
                lost[k2] = lost.get(k2, 0) + y
        elif k != "rx_no_buffer_events":
            lost[k] = lost.get(k, 0) + x
q = [p["rx"]["per_queue"] for p in v["ports"]]
print("%.3f Mpps forwarded (%d in %.2f s), rx per queue %s, losses %s" % (
    v["forwarded"] / t / 1e6, v["forwarded"], t, q,
    {k: x for k, x in lost.items() if x} or "none"))
' "$@"
}

cores_for() { # the first N CPUs, comma-separated
  seq -s, 0 $(($1 - 1))
}

if [[ $PARTS == *model* ]]; then
  for q in 1 2; do
    ((q <= NCPU)) || continue
    printf 'model, %d queue pair(s), cores %s: ' "$q" "$(cores_for "$q")"
    "$FWD" -b model -d m --queues "$q" --cores "$(cores_for "$q")" --tx-first 1024 \
      --ring 1024 -t "$SECS" --quiet --json --rule 'udp dst-port 9000 -> queue 0' | summary
  done
fi

if [[ $PARTS == *veth* ]]; then
  [[ $(id -u) == 0 ]] || { echo "bench: the veth part needs root (namespaces)" >&2; exit 1; }
  TAG=$$
  NSA=rawq-bfwd-$TAG-a NSB=rawq-bfwd-$TAG-b
  VA=rqbf${TAG}a VB=rqbf${TAG}b
  VA=${VA:0:15} VB=${VB:0:15}
  cleanup() {
    local p
    for p in $(jobs -p); do kill -INT "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip netns del "$NSA" 2>/dev/null || true
    ip netns del "$NSB" 2>/dev/null || true
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  ip netns add "$NSA"
  ip netns add "$NSB"
  ip link add "$VA" netns "$NSA" numtxqueues 2 numrxqueues 2 type veth \
    peer name "$VB" netns "$NSB" numtxqueues 2 numrxqueues 2
  ip -n "$NSA" addr add 10.203.251.1/24 dev "$VA"
  ip -n "$NSB" addr add 10.203.251.2/24 dev "$VB"
  ip -n "$NSA" link set "$VA" up
  ip -n "$NSB" link set "$VB" up
  for q in 1 2; do
    ((q <= NCPU)) || continue
    printf 'veth AF_XDP, %d queue pair(s), cores %s: ' "$q" "$(cores_for "$q")"
    ip netns exec "$NSB" "$FWD" -d "$VB" --queues "$q" --cores "$(cores_for "$q")" \
      --mode macswap --ring 2048 -t $((SECS + 2)) --quiet --json \
      --rule 'udp dst-port 9000 -> queue 0' >"/tmp/bench-fwd-$TAG.json" &
    F=$!
    for _ in $(seq 100); do
      ip -n "$NSB" link show "$VB" | grep -q xdp && break
      sleep 0.1
    done
    ip netns exec "$NSA" "$PKTGEN" -b xdp -d "$VA" -q "$q" --flows 64 -t "$SECS" --quiet \
      >/dev/null
    wait "$F" || true
    # Over the sender's window: fwd runs 2 s longer so as to see every frame.
    summary "$SECS" <"/tmp/bench-fwd-$TAG.json"
    rm -f "/tmp/bench-fwd-$TAG.json"
  done
fi
