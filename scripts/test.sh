#!/usr/bin/env bash
# Sets up what rawq needs (Debian/Ubuntu packages) and runs the whole test suite.
# Run as root: the AF_XDP, namespace and demo tests create network namespaces and veth pairs.
# With RAWQ_REQUIRE_NETNS=1 (CI sets it) tests that cannot create namespaces fail instead of
# printing "skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --all-features --no-fail-fast
