#!/usr/bin/env bash
# Runs DPDK's dpdk-testpmd (Debian 12: DPDK 22.11, its unmodified mlx5 PMD) on rawq's emulated
# ConnectX (scripts/emu.sh): mlx5_0 at PCI 0000:00:05.0 and, with --pair, mlx5_1 at 0000:00:06.0,
# found by the PMD in the emulator's sysfs tree ($SYSFS_PCI_DEVICES).
#
# Usage: bash scripts/testpmd-emu.sh [--pair | --wire IFNAME] [--netdev TAP[,TAP1]]
#          [--min-inline none|l2] [--release] [--devargs K=V,...] [--lcores LIST] [--eal ARG]...
#          -- [testpmd args]
#   --pair / --wire / --cable / --min-inline / --release   as scripts/emu.sh (--min-inline l2 plays a
#                  ConnectX-4 Lx: PCI device 0x1015, L2 header inline on every send)
#   --only-first   with --pair: the PMD is given mlx5_0 alone (mlx5_1 stays the cable's far end,
#                  taking what mlx5_0 sends, counted in its RAWQ_EMU_STATS file, and with no
#                  TAP of its own by default: a sink)
#   --netdev       the ports' kernel netdevs, TAPs (the PMD takes ifindex, MAC, MTU and link
#                  state from them); default: dpdkemu<PID>[,dpdkemu<PID>b], made and removed here
#   --devargs      mlx5 device arguments added to dv_flow_en=0 (required: the DV flow engine
#                  needs the ioctl uAPI the emulator refuses), e.g. rxq_cqe_comp_en=0,mprq_en=1
#   --mem MB       EAL memory, without hugepages (default 1024)
#   --lcores       EAL core list (default 0-1: testpmd's main lcore and one forwarding lcore);
#                  a map with @ (e.g. 0@0,1@1,2@1: three lcores on two CPUs) goes to EAL's --lcores
#   --eal ARG      one more EAL argument (repeatable)
#   --unbuffered   testpmd's stdout unbuffered (stdbuf -o0), for a program driving it through
#                  pipes: its prompt and answers arrive as they are written
#   everything after -- goes to testpmd (e.g. -i --forward-mode=io --rxq=4 --txq=4)
#   DPDK_TESTPMD=/path/to/dpdk-testpmd   another binary (default: dpdk-testpmd on PATH)
#   RAWQ_EMU_STATS / RAWQ_EMU_LIB / RAWQ_EMU_DEBUG / RAWQ_EMU_PAUSE reach the emulator
#
# EAL runs without hugepages (--no-huge -m MB; IOVA as VA) and with its runtime directory
# (config lock, mp socket) in a temporary directory removed on exit.
#
# Stop testpmd with its "quit" command (stdin) or ONE signal to this script: testpmd 22.11's
# signal handler calls cmdline_quit() on a context prompt() has already freed, so a second
# SIGINT/SIGTERM during its shutdown corrupts its heap. This script and emu.sh each forward a
# signal once; `timeout` signals the whole process group (every one of them): use
# `timeout --foreground`, or send the signal to this script's pid only.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

EMU_OPTS=() EAL=() NETDEV="" DEVARGS="" LCORES=0-1 PAIR=0 MEM=1024 WRAP=()
while (($#)); do
  case "$1" in
    --pair) PAIR=1; EMU_OPTS+=("$1"); shift ;;
    --only-first) ONLY_FIRST=1; shift ;;
    --release) EMU_OPTS+=("$1"); shift ;;
    --wire|--min-inline|--cable) EMU_OPTS+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --netdev) NETDEV=${2:?--netdev needs a TAP name}; shift 2 ;;
    --devargs) DEVARGS=${2:?--devargs needs K=V,...}; shift 2 ;;
    --mem) MEM=${2:?--mem needs megabytes}; shift 2 ;;
    --lcores) LCORES=${2:?--lcores needs a list}; shift 2 ;;
    --eal) EAL+=("${2:?--eal needs an argument}"); shift 2 ;;
    --unbuffered) WRAP=(stdbuf -o0 -e0); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "testpmd-emu: unknown option $1 (testpmd's own arguments go after --)" >&2; exit 2 ;;
  esac
done

TESTPMD=${DPDK_TESTPMD:-$(command -v dpdk-testpmd || true)}
[[ -n $TESTPMD && -x $TESTPMD ]] || {
  echo "testpmd-emu: dpdk-testpmd not found (scripts/setup.sh installs dpdk-dev and the mlx5 PMD)" >&2
  exit 1
}
if [[ -z $NETDEV ]]; then
  # Short enough for IFNAMSIZ with the "b" of the second device.
  NETDEV=dpdkemu$(($$ % 100000))
  [[ $PAIR == 1 && ${ONLY_FIRST:-0} != 1 ]] && NETDEV+=",${NETDEV}b"
fi

ALLOW=(-a "0000:00:05.0,dv_flow_en=0${DEVARGS:+,$DEVARGS}")
[[ $PAIR == 1 && ${ONLY_FIRST:-0} != 1 ]] && ALLOW+=(-a "0000:00:06.0,dv_flow_en=0${DEVARGS:+,$DEVARGS}")

RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/rawq-dpdk.XXXXXX")
CHILD=''
cleanup() {
  trap - EXIT INT TERM
  if [[ -n $CHILD ]] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM "$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  rm -rf "$RUNDIR"
}
# One signal, forwarded once to emu.sh (which forwards it once to testpmd), then wait for it.
on_signal() {
  trap '' INT TERM
  [[ -n $CHILD ]] && kill -TERM "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
  CHILD=''
  cleanup
  exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

CORE_OPT=(-l "$LCORES")
[[ $LCORES == *@* ]] && CORE_OPT=(--lcores "$LCORES")

# emu.sh generates the sysfs tree (SYSFS_PATH) with the PCI functions; EAL's PCI bus lists
# $SYSFS_PCI_DEVICES, set below from inside emu.sh's environment.
set +e
RUNTIME_DIRECTORY=$RUNDIR bash "$ROOT/scripts/emu.sh" "${EMU_OPTS[@]}" --netdev "$NETDEV" -- \
  bash -c 'export SYSFS_PCI_DEVICES=$SYSFS_PATH/bus/pci/devices; exec "$@"' testpmd \
  "${WRAP[@]}" "$TESTPMD" "${CORE_OPT[@]}" --no-huge -m "$MEM" "${ALLOW[@]}" "${EAL[@]}" -- "$@" <&0 &
CHILD=$!
wait "$CHILD"
status=$?
CHILD=''
exit "$status"
