#!/usr/bin/env bash
# Installs what rawq needs to build, test and demo on Debian 12 / Ubuntu 22.04+ (run as root).
# Idempotent: packages already present are skipped, so CI and repeated runs are cheap.
set -euo pipefail

PKGS=(
  # build: the emulator's bindgen (rawq-emu), the tests' C oracles, scripts/gen-bindings.sh
  # (rawq and the tools themselves build with none of these)
  build-essential pkg-config libclang-dev
  libibverbs-dev ibverbs-providers librdmacm-dev
  # tests and demo: namespaces, veth, captures, peers
  iproute2 iputils-ping tcpdump tshark netsniff-ng python3
  # emulated NIC peers: libibverbs' own tools and perftest run against the emulator
  ibverbs-utils perftest
  # bench peers and instruction counts
  dpdk-dev librte-net-af-xdp23 valgrind ethtool xdp-tools
  # DPDK's mlx5 PMD on the emulated NIC (dpdk-testpmd is in dpdk-dev; scripts/testpmd-emu.sh)
  librte-net-mlx5-23 librte-common-mlx5-23
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust (rustup) first" >&2
  exit 1
fi
