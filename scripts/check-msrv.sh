#!/usr/bin/env bash
# The workspace's declared rust-version must be at least what every resolved dependency declares
# (cargo metadata's rust_version of each package in the resolved graph, for this platform, all
# features, dev-dependencies included). Prints the highest ones; exits 1 if the declaration is
# lower than any of them.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
cargo metadata --format-version 1 --all-features --filter-platform "$host" --locked |
  python3 -c '
import json, sys
m = json.load(sys.stdin)
resolved = {n["id"] for n in m["resolve"]["nodes"]}
members = set(m["workspace_members"])
def v(s):
    parts = [int(x) for x in (s or "0").split(".")]
    return tuple(parts + [0] * (3 - len(parts)))
ours = {p["name"]: p.get("rust_version") for p in m["packages"] if p["id"] in members}
declared = max((v(r) for r in ours.values()), default=(0, 0, 0))
lowest = min((v(r) for r in ours.values()), default=(0, 0, 0))
deps = sorted(((v(p.get("rust_version")), p["name"], p["version"]) for p in m["packages"]
               if p["id"] in resolved and p["id"] not in members), reverse=True)
need = deps[0][0] if deps else (0, 0, 0)
fmt = lambda t: ".".join(map(str, t))
print("msrv: declared", {k: r for k, r in sorted(ours.items())})
print("msrv: highest dependency requirements:",
      ", ".join(f"{n} {ver} ({fmt(r)})" for r, n, ver in deps[:5]))
if lowest < need:
    print(f"msrv: FAIL: a crate declares rust-version {fmt(lowest)} but {deps[0][1]} needs {fmt(need)}")
    sys.exit(1)
print(f"msrv: ok: every crate declares at least {fmt(need)}")
'
