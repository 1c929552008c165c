#!/usr/bin/env bash
# Runs a command on rawq's emulated ConnectX (mlx5_0): unmodified libibverbs + libmlx5 talk to
# an emulated uverbs kernel (librawq_emu.so, LD_PRELOAD) whose hardware is rawq's device model.
#
# Usage: bash scripts/emu.sh [--wire IFNAME | --pair | --cable PATH] [--netdev TAPNAME] [--min-inline none|l2]
#                            [--part cx5|cx4lx] [--ext-stride-range on|off] [--debug | --release] -- COMMAND [ARGS...]
#   --wire IFNAME      the port's wire is that interface (AF_PACKET); default: looped back
#   --pair             two devices, mlx5_0 and mlx5_1, cabled to each other
#   --cable PATH       the port's wire is a cable to the emulated device of another process run
#                      with the same --cable PATH (a unix SOCK_SEQPACKET socket at PATH: the first
#                      to come binds it and waits, the second connects): --pair across two
#                      processes, each with its own mlx5_0. The port is down until the other end
#                      comes and once it is gone. Give each side a --netdev for distinct MACs
#   --netdev TAPNAME   the port's kernel netdev: a TAP device, created here if it does not exist
#                      (and then removed on exit); frames no flow rule takes go there. With
#                      --pair, TAP0,TAP1 gives each device its own (a TAP takes one device).
#                      The TAP gets its port's MAC (what DPDK's mlx5 PMD reads as the port's)
#   --min-inline MODE  none (ConnectX-5, default) or l2 (ConnectX-4 Lx: the L2 header inline)
#   --part cx5|cx4lx   the part the device claims (PCI id); default: the one --min-inline implies
#                      (none: cx5, l2: cx4lx). cx5 with l2 is a ConnectX-5 demanding the L2 header
#   --ext-stride-range on|off  the ext_stride_num_range capability (default on): striding RQ
#                      WQEs of 2^3 strides and up; off: 2^9 and up, as the kernel allows then
#   --mtu N            the port MTU (68..9198): frames above N + 18 bytes are dropped and counted
#                      (rx_oversize); default: 9216-byte frames. The port's netdev has it too
#                      (a --netdev TAP is set to it; without --netdev or --wire, a TAP made here
#                      that carries no frames, rqemuPID, names the port's netdev)
#   --release          the release build of the emulator (the default)
#   --debug            the debug build of the emulator (slower; for debugging the emulator)
#   RAWQ_EMU_LIB=/path/librawq_emu.so  use that library (no build)
#   RAWQ_EMU_DEBUG=1   log every uverbs command on stderr
#
# The emulator is built first (`cargo build -p rawq-emu`, said on stderr: the first build takes
# minutes). The sysfs tree is generated in a temporary directory; it, and a TAP device made
# here, are removed when the command ends, on Ctrl-C, SIGTERM (also twice, as `timeout` sends)
# and SIGKILL (a reaper process outlives this shell for that, and the command gets SIGTERM when
# the shell dies). Exits with the command's status.
#
# A signal reaches the command once: one sent to the whole process group (Ctrl-C at a terminal,
# `timeout`) has reached the command too, which is then left to end on its own (20 s at most);
# one sent to this shell alone (kill PID, `timeout --foreground`) is passed on as SIGTERM. A
# sentinel process in the command's group tells the two apart (it dies of a group signal);
# without `env --default-signal` (coreutils 8.31) every signal is passed on.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

WIRE='' NETDEV='' MIN_INLINE=none PART='' EXT_STRIDE=1 PROFILE=release PAIR=0
CABLE=''
usage() {
  echo "usage: $0 [--wire IFNAME | --pair | --cable PATH] [--netdev TAPNAME] [--min-inline none|l2] [--part cx5|cx4lx] [--ext-stride-range on|off] [--mtu N] [--debug | --release] -- COMMAND [ARGS...]" >&2
  exit 2
}
# Option $1's value $2 (empty when missing) must be there and not another option; $3 says
# what it is.
value() {
  if [[ -z $2 || $2 == -* ]]; then
    echo "emu: $1 needs $3" >&2
    usage
  fi
}
while (($#)); do
  case "$1" in
    --wire) value "$1" "${2-}" "an interface name (--wire IFNAME)"; WIRE=$2; shift 2 ;;
    --netdev) value "$1" "${2-}" "a TAP name (--netdev TAPNAME)"; NETDEV=$2; shift 2 ;;
    --min-inline)
      value "$1" "${2-}" "a mode: none or l2 (--min-inline none|l2)"
      MIN_INLINE=$2
      [[ $MIN_INLINE == none || $MIN_INLINE == l2 ]] || { echo "emu: --min-inline is none or l2" >&2; exit 2; }
      shift 2 ;;
    --part)
      value "$1" "${2-}" "a part: cx5 or cx4lx (--part cx5|cx4lx)"
      PART=$2
      [[ $PART == cx5 || $PART == cx4lx ]] || { echo "emu: --part is cx5 or cx4lx" >&2; exit 2; }
      shift 2 ;;
    --ext-stride-range)
      value "$1" "${2-}" "on or off (--ext-stride-range on|off)"
      case $2 in on) EXT_STRIDE=1 ;; off) EXT_STRIDE=0 ;; *) echo "emu: --ext-stride-range is on or off" >&2; exit 2 ;; esac
      shift 2 ;;
    --mtu)
      value "$1" "${2-}" "an MTU (--mtu N)"
      [[ $2 =~ ^[0-9]+$ ]] && (($2 >= 68 && $2 <= 9198)) || { echo "emu: --mtu is 68..9198" >&2; exit 2; }
      export RAWQ_EMU_MTU=$2
      shift 2 ;;
    --release) PROFILE=release; shift ;;
    --debug) PROFILE=debug; shift ;;
    --pair) PAIR=1; shift ;;
    --cable) value "$1" "${2-}" "a socket path (--cable PATH)"; CABLE=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "emu: unknown option $1" >&2; usage ;;
  esac
done
(($#)) || { echo "emu: no command to run (after --)" >&2; usage; }
if [[ $PAIR == 1 && -n $WIRE ]]; then
  echo "emu: --pair cables the two devices to each other; it takes no --wire" >&2
  exit 2
fi

if [[ -n $CABLE && ($PAIR == 1 || -n $WIRE) ]]; then
  echo "emu: --cable is the port's wire; it takes no --pair or --wire" >&2
  exit 2
fi

if [[ -n $WIRE ]] && ! ip link show dev "$WIRE" >/dev/null 2>&1; then
  echo "emu: --wire $WIRE: no such interface in this network namespace" >&2
  exit 1
fi

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ -n ${RAWQ_EMU_LIB:-} ]]; then
  LIB=$RAWQ_EMU_LIB
  SYSFS_GEN=${RAWQ_EMU_SYSFS:-$(dirname "$LIB")/rawq-emu-sysfs}
else
  flag=()
  [[ $PROFILE == release ]] && flag=(--release)
  echo "emu: building the $PROFILE emulator (cargo build -p rawq-emu${flag[*]:+ ${flag[*]}}; the" \
    "first build takes minutes)$([[ $PROFILE == release ]] && echo '; --debug for the debug one')" >&2
  (cd "$ROOT" && cargo build --quiet -p rawq-emu "${flag[@]}")
  LIB=$TARGET/$PROFILE/librawq_emu.so
  SYSFS_GEN=$TARGET/$PROFILE/rawq-emu-sysfs
fi
for f in "$LIB" "$SYSFS_GEN"; do
  [[ -e $f ]] || { echo "emu: $f is missing (cargo build -p rawq-emu)" >&2; exit 1; }
done

# The temporary tree's name is chosen here, in this shell, and the directory made only once
# the traps below are set: a signal at start-up (the campaign's seed 5371, a group SIGTERM
# 56 ms in) could otherwise come between `mktemp` making it and the trap that removes it.
TMP=${TMPDIR:-/tmp}/rawq-emu.$$.$RANDOM$RANDOM
MADE_TAP=()
CHILD=''
REAPER=''
SENTINEL=''
# The signal that stopped this shell (its number), if one did.
SIGNUM=''
# Whether $1 (a pid) is gone or a zombie.
gone() {
  local st
  st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 0
  [[ -z $st || $st == Z ]]
}
# Polls for up to $2 tenths of a second until the command (pid $1) has ended.
wait_gone() {
  local _i
  for ((_i = 0; _i < $2; _i++)); do
    gone "$1" && return 0
    sleep 0.1
  done
  return 1
}
# Whether the signal SIGNUM was sent to the command's process group (the sentinel, in that
# group, died of it: a group signal is queued to every member at once; waits 1 s at most), and
# the command does not ignore it (SigIgn; a command started in the background by a shell
# ignores SIGINT): then the command has it already.
group_signalled() {
  local mask
  [[ -n $SENTINEL && -n $SIGNUM ]] || return 1
  wait_gone "$SENTINEL" 10 || return 1
  mask=$(awk '/^SigIgn:/ { print $2 }' "/proc/$CHILD/status" 2>/dev/null) || return 1
  [[ -n $mask ]] || return 1
  (( ((16#$mask >> (SIGNUM - 1)) & 1) == 0 ))
}
# Stops the command and removes what this script made. A command that got the signal from its
# group is given 20 s to end on its own (a second signal would end it at once, without its
# summary); otherwise, or past that, SIGTERM, then SIGKILL past 5 s. Signals are ignored from
# here on: `timeout` sends SIGTERM twice (to the shell, then to its group), and the second must
# not end the shell half-way.
cleanup() {
  trap '' INT TERM HUP
  trap - EXIT
  # Disowned (they are not this shell's jobs any more): their end is not reported on stderr.
  [[ -z $REAPER ]] || kill -KILL "$REAPER" 2>/dev/null || true
  if [[ -n $CHILD ]] && kill -0 "$CHILD" 2>/dev/null; then
    if ! group_signalled || ! wait_gone "$CHILD" 200; then
      kill -TERM "$CHILD" 2>/dev/null || true
      wait_gone "$CHILD" 50 || kill -KILL "$CHILD" 2>/dev/null || true
    fi
    wait "$CHILD" 2>/dev/null || true
  fi
  [[ -z $SENTINEL ]] || kill -KILL "$SENTINEL" 2>/dev/null || true
  for t in "${MADE_TAP[@]}"; do ip link del "$t" 2>/dev/null || true; done
  rm -rf "$TMP"
}
on_signal() {
  SIGNUM=$(($1 - 128))
  cleanup
  exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP
until mkdir -m 700 -- "$TMP" 2>/dev/null; do
  [[ -d ${TMP%/*} ]] || { echo "emu: cannot make a directory in ${TMP%/*} (TMPDIR)" >&2; exit 1; }
  TMP=${TMPDIR:-/tmp}/rawq-emu.$$.$RANDOM$RANDOM
done

IFS=, read -r -a TAPS <<<"$NETDEV"
for t in "${TAPS[@]}"; do
  if ! ip link show dev "$t" >/dev/null 2>&1; then
    ip tuntap add dev "$t" mode tap
    MADE_TAP+=("$t")
    ip link set dev "$t" up
  fi
done

# The port's netdev has the port's MTU, as a ConnectX's does (--mtu: the TAPs' MTU too).
PORT_MTU=${RAWQ_EMU_MTU:-9198}
if [[ -n ${RAWQ_EMU_MTU:-} ]]; then
  for t in "${TAPS[@]}"; do ip link set dev "$t" mtu "$PORT_MTU" 2>/dev/null || true; done
fi
# A port with neither a TAP nor a --wire still reports a netdev of its own (its MTU, its
# ethtool statistics, which the interposer answers): a TAP made here that carries nothing, left
# down. Where one cannot be made (no CAP_NET_ADMIN), the port names lo, as before.
PORT_NETDEV=''
if [[ -z $NETDEV && -z $WIRE ]]; then
  names=("rqemu$$")
  ((PAIR)) && names+=("rqemu$$b")
  for t in "${names[@]}"; do
    if ip tuntap add dev "$t" mode tap 2>/dev/null; then
      MADE_TAP+=("$t")
      ip link set dev "$t" mtu "$PORT_MTU" 2>/dev/null || true
      PORT_NETDEV+=${PORT_NETDEV:+,}$t
    fi
  done
fi

export RAWQ_EMU_PORT_NETDEV=$PORT_NETDEV
export RAWQ_EMU_WIRE=$WIRE RAWQ_EMU_NETDEV=$NETDEV RAWQ_EMU_MIN_INLINE=$MIN_INLINE RAWQ_EMU_PAIR=$PAIR
export RAWQ_EMU_EXT_STRIDE_RANGE=$EXT_STRIDE RAWQ_EMU_PART=$PART
export RAWQ_EMU_CABLE=$CABLE
"$SYSFS_GEN" "$TMP/sys"
# Each TAP takes its port's MAC, which the tree lists with the PCI function's netdev.
for f in "$TMP"/sys/class/infiniband/mlx5_*/device/net/*/address; do
  [[ -e $f ]] || continue
  t=$(basename "$(dirname "$f")")
  ip link set dev "$t" address "$(cat "$f")" 2>/dev/null || echo "emu: cannot set $t's MAC" >&2
done

# The command gets SIGTERM if this shell dies (even by SIGKILL): PR_SET_PDEATHSIG through
# util-linux's setpriv, where it has --pdeathsig. The preload is set by `env`, after setpriv.
PRELOAD=$LIB${LD_PRELOAD:+:$LD_PRELOAD}
pdeath=()
if setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then
  pdeath=(setpriv --pdeathsig TERM --)
fi

# The sentinel: in this shell's (and the command's) process group, dying of INT, TERM or HUP
# (reset from the background's SIGINT-ignored), so that a group signal is told from one sent to
# this shell alone (group_signalled). Disowned: its end is not reported.
if env --default-signal=INT true 2>/dev/null; then
  env --default-signal=INT,TERM,HUP sleep infinity </dev/null >/dev/null 2>&1 &
  SENTINEL=$!
  disown "$SENTINEL"
fi

# Run in the background and wait, so that a signal reaches the trap at once.
set +e
"${pdeath[@]}" env SYSFS_PATH="$TMP/sys" LD_PRELOAD="$PRELOAD" "$@" <&0 &
CHILD=$!
# The reaper: in a session of its own (no signal to this shell's group reaches it), it waits
# for this shell to end; if the shell could not clean up (SIGKILL), it stops the command and
# removes the TAPs and the tree. A shell that cleans up kills it first.
setsid bash -c '
  trap "" INT TERM HUP
  parent=$1 child=$2 tmp=$3
  shift 3
  tail --pid="$parent" -s 0.1 -f /dev/null
  if kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$child" 2>/dev/null
  fi
  for tap in "$@"; do ip link del "$tap" 2>/dev/null; done
  rm -rf "$tmp"
' rawq-emu-reaper "$$" "$CHILD" "$TMP" "${MADE_TAP[@]}" </dev/null >/dev/null 2>&1 &
REAPER=$!
disown "$REAPER"
wait "$CHILD"
status=$?
CHILD=''
set -e
exit "$status"
