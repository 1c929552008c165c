#!/usr/bin/env bash
# Instructions per packet of rawq's send path on the emulated ConnectX, through libmlx5's
# ibv_post_send (the verbs backend, -b verbs) beside rawq's own DV send (-b dv), both on the
# same emulated device (scripts/emu.sh, looped-back port) in one run of this script.
#
# Each backend runs pktgen (tx only, 60-byte frames, no rate limit) under valgrind
# --tool=callgrind, twice:
#   post:  16000 frames on a ring of 16384, counting only inside the queue's tx_burst: the ring
#          never fills, so this is building the WQEs, libmlx5's ibv_post_send (verbs) or rawq's
#          WQE writer (dv), and the doorbell / BlueFlame writes, with no completion in it.
#   total: N frames on the default ring, counting inside tx_burst and reclaim: the whole send
#          path with polling send completions and freeing buffers. This one includes the empty
#          polls of a sender waiting for the device thread (which valgrind runs one thread at a
#          time), so it varies from run to run; read `post` for the comparison.
# The emulated device's thread runs in the same process; it never enters tx_burst or reclaim,
# and callgrind keeps the collection state (--toggle-collect) per thread, so none of the device
# model's work is counted. Not counted either: pktgen's frame building and counting.
#
# If -b dv does not run on the emulator, the DV figures come from -b model (the same DV send
# code driving the in-process device model directly; its `total` includes the device's work)
# and are labelled so.
#
# Usage: scripts/callgrind-emu-send.sh [N] [--dev]   (default N = 200000 packets for `total`;
#        --dev: the dev profile instead of release). KEEP=1 keeps the callgrind files.
set -euo pipefail
cd "$(dirname "$0")/.."
N=200000 PROFILE=release
for a in "$@"; do
  case "$a" in
    --dev) PROFILE=debug ;;
    ''|*[!0-9]*) echo "usage: $0 [N] [--dev]" >&2; exit 2 ;;
    *) N=$a ;;
  esac
done
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
command -v callgrind_annotate >/dev/null || { echo "callgrind_annotate not found (valgrind)" >&2; exit 1; }

flag=()
[[ $PROFILE == release ]] && flag=(--release)
cargo build --quiet "${flag[@]}" --all-features --bin rawq-pktgen
cargo build --quiet "${flag[@]}" -p rawq-emu
TARGET=${CARGO_TARGET_DIR:-target}
PKTGEN=$TARGET/$PROFILE/rawq-pktgen
export RAWQ_EMU_LIB=$PWD/$TARGET/$PROFILE/librawq_emu.so
export RAWQ_EMU_SYSFS=$PWD/$TARGET/$PROFILE/rawq-emu-sysfs

OUT=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$OUT"' EXIT

# Runs pktgen -b $1 under callgrind in mode $2 (post|total), under the emulator unless
# $3 = bare; prints "instructions packets" (packets: what pktgen reports sent).
measure() {
  local backend=$1 mode=$2 how=${3:-emu} run=() args=() toggles=()
  [[ $how == emu ]] && run=(bash scripts/emu.sh --)
  toggles=(--toggle-collect='*QueueOps>::tx_burst')
  if [[ $mode == post ]]; then
    args=(-n 16000 --ring 16384)
  else
    args=(-n "$N")
    toggles+=(--toggle-collect='*QueueOps>::reclaim')
  fi
  local tag=$backend.$mode
  "${run[@]}" valgrind --tool=callgrind --callgrind-out-file="$OUT/$tag.out" "${toggles[@]}" \
    "$PKTGEN" -b "$backend" -d mlx5_0 -s 60 "${args[@]}" --json \
    >"$OUT/$tag.json" 2>"$OUT/$tag.log" || return 1
  local ir pk
  ir=$(callgrind_annotate "$OUT/$tag.out" 2>/dev/null |
    awk '/PROGRAM TOTALS/ && !d {gsub(",","",$1); print $1; d=1}')
  pk=$(grep -o '"packets":[0-9]*' "$OUT/$tag.json" | tail -1 | cut -d: -f2)
  [[ -n $ir && -n $pk && $pk -gt 0 ]] || return 1
  echo "$ir $pk"
}

report() {
  local label=$1 ir=$2 pk=$3
  printf '%-66s %11s Ir / %6s pkts = %6.1f per packet\n' "$label" "$ir" "$pk" \
    "$(awk -v a="$ir" -v b="$pk" 'BEGIN{print a/b}')"
}

echo "send path, 60-byte frames, $PROFILE build; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in post total; do
  if r=$(measure verbs $mode); then
    report "$mode  verbs (libmlx5 ibv_post_send), emulated ConnectX" $r
  else
    echo "verbs: failed:" >&2; tail -5 "$OUT/verbs.$mode.log" >&2; exit 1
  fi
  if r=$(measure dv $mode); then
    report "$mode  dv (rawq's WQE writer), emulated ConnectX" $r
  elif r=$(measure model $mode bare); then
    echo "dv: does not run on the emulator here:" >&2; tail -3 "$OUT/dv.$mode.log" >&2
    report "$mode  DV send code on -b model (NOT the emulator)" $r
  else
    echo "dv and model: failed:" >&2; tail -5 "$OUT/dv.$mode.log" "$OUT/model.$mode.log" >&2; exit 1
  fi
done
