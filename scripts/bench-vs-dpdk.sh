#!/usr/bin/env bash
# rawq's DV data path beside DPDK's mlx5 PMD (dpdk-testpmd, Debian's unmodified build) on the
# same emulated ConnectX-5 (scripts/emu.sh, looped-back port, release emulator), in one run of
# this script: callgrind instructions per packet on the thread doing the work.
#
#   tx: `pktgen -b dv -s 60` beside `testpmd --forward-mode=txonly --txpkts=64` (burst 32).
#   rx: `pktgen -b dv --rx` beside `testpmd --forward-mode=rxonly` (burst 32), both fed 60-byte
#       frames by the emulator's own frame source (RAWQ_EMU_RXGEN, inside the process: an
#       external sender reached ~430 frames/s under valgrind) with flow control on
#       (RAWQ_EMU_PAUSE=1: the port holds a frame while the RQ is empty, so the source goes as
#       fast as the receiver refills and nothing is dropped); the run ends once every generated
#       frame is in (generated == the device's rx_frames == the tool's count, all checked).
#   io: `fwd -b dv --mode io` beside `testpmd --forward-mode=io`, one port each (rx 0 -> tx 0),
#       on `scripts/emu.sh --pair`: the emulator's frame source feeds mlx5_0 (flow control on, as
#       rx), the forwarder sends each frame back out of mlx5_0, over the cable to mlx5_1, where
#       nothing receives (its counters, RAWQ_EMU_STATS.mlx5_1, count what arrived). testpmd is
#       given mlx5_0 alone (testpmd-emu.sh --only-first). A looped-back port does not work here:
#       with flow control the forwarded frames and the generated ones wait for the same RQ.
#
# How it counts (valgrind --tool=callgrind --separate-threads=yes --fair-sched=yes):
# * the worker thread is the one running pktgen's tx_loop / fwd's forwarding loop / testpmd's
#   forwarding lcore; its whole cost is the "whole" figure (pktgen's `settle` after the loop,
#   and the thread's set-up before it, are left out);
# * the driver is the inclusive cost of the burst calls: rawq's `DvQueue::{tx,rx}_burst` (and
#   `alloc_burst`); DPDK's libraries are stripped, so its burst functions are found by their
#   place in the call graph: the functions of librte_net_mlx5 the forwarding function calls
#   once per burst (their call counts are printed beside testpmd's own burst counts;
#   `--log-level=pmd.net.mlx5:debug` names the Tx/Rx function the PMD selected, printed too);
# * empty polls: valgrind runs one thread at a time, so a sender can fill its ring while the
#   device thread waits for its turn and then poll a full ring, and a forwarder polls an empty
#   one. Each tool runs twice (rings of two sizes, so the share of empty calls differs) and the
#   cost is fitted as Ir = a * packets + c * calls: `c` is what an empty call costs, and
#   "per packet" is a + c / 32 (a full burst of 32, no empty calls). The raw figures of both
#   runs are printed beside the fit.
#   testpmd rxonly is the exception (its lcore never naps: 99.97 % of its bursts are empty
#   under valgrind, which no fit sees through): its second run has nothing generated, giving an
#   empty call's exact cost, and rxcost.py takes the packets' cost from the burst function's
#   inclusive cost with exact call counts (--dump-instr=yes; docs/performance.md "How DPDK's receive figure
#   was found").
# * io is counted exactly instead, for both tools (iocost.py, --dump-instr=yes): empty rounds =
#   rx burst calls - tx burst calls (both forwarders call tx only after a non-empty rx; fwd's
#   `reclaim` calls, one per empty round, cross-check it), each costed at what an empty round
#   costs in a second run with nothing generated (per part: rx burst, reclaim, the whole loop),
#   and per forwarded packet = (cost - empty rounds' cost) / forwarded. DPDK's empty rx bursts
#   take data-dependent paths in its CQE scan: rxcost.py bounds them (as for rx) and the figure
#   is a range. rawq's functions are not stripped: its parts are its call sites in fwd's loop
#   (DvQueue's rx_burst, tx_burst, reclaim). fwd runs with `--rx-mode interrupt` (the packets'
#   path is the same; an empty round sleeps until a completion arrives, so that valgrind, which
#   runs one thread at a time, gives the device the CPU): its empty rounds are then a few
#   percent, where polling they were 99.9 % and their cost depends on the queues' state (a
#   reclaim with sends outstanding polls the CQ: the idle run's cost is not theirs), which no
#   subtraction gets exact. The sleeps (rx_wait_any) are left out; "nothing subtracted" is
#   printed beside it as the upper bound.
# * each tool's packet counts are checked against the emulated device's (RAWQ_EMU_STATS).
# * data-cache misses beside the instructions (callgrind --cache-sim=yes, its geometry pinned
#   to this VM's caches: CACHE below): D1 and LL read and write misses a packet of the driver
#   and the whole thread, rawq's and testpmd's side by side. tx: the same two-run fit as the
#   instructions, for both tools; rx and io: every call's misses over the packets, nothing
#   subtracted, for both (an empty poll reads lines already in the cache).
# DPDK's settings are pinned and printed: txq_mpw_en=1 (eMPW, as rawq on this part),
# txq_inline_min=0, txq_inline_max=0, txq_inline_mpw=0 (no inline data: the emulated part
# needs none, rawq inlines none), rxq_cqe_comp_en=1 (CQE compression, as rawq by default).
#
# Usage (as root): bash scripts/bench-vs-dpdk.sh [--modes tx,rx,io] [--sides rawq,dpdk]
#                  [--seconds S] [--keep]
#   --sides       which tools run (default both; `--modes rx --sides dpdk`: testpmd's rx runs only)
#   --seconds S   testpmd's forwarding window under valgrind (default 20)
#   IO_COUNT=N    io: frames generated (default 200000); IDLE_SECS=S: the idle runs' length (10)
#   --keep        keep the callgrind files and logs (their directory is printed)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODES=tx,rx,io SECS=20 KEEP=0 SIDES=rawq,dpdk
while (($#)); do
  case "$1" in
    --modes) MODES=${2:?}; shift 2 ;;
    --seconds) SECS=${2:?}; shift 2 ;;
    --sides) SIDES=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
  esac
done
for t in valgrind callgrind_annotate python3 dpdk-testpmd; do
  command -v $t >/dev/null || { echo "bench: $t not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
DEVARGS=txq_mpw_en=1,txq_inline_min=0,txq_inline_max=0,txq_inline_mpw=0,rxq_cqe_comp_en=1

echo "bench: building pktgen, fwd and the emulator (release)…" >&2
[[ ,$SIDES, != *,rawq,* ]] || cargo build --release --quiet --all-features --bin rawq-pktgen --bin rawq-fwd
cargo build --release --quiet -p rawq-emu
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export RAWQ_EMU_LIB=$TARGET/release/librawq_emu.so
export RAWQ_EMU_SYSFS=$TARGET/release/rawq-emu-sysfs
PKTGEN=$TARGET/release/rawq-pktgen FWD=$TARGET/release/rawq-fwd

OUT=$(mktemp -d "${TMPDIR:-/tmp}/rawq-vs-dpdk.XXXXXX")
[[ $KEEP == 1 ]] && echo "bench: files in $OUT" >&2
trap '[[ $KEEP == 1 ]] || rm -rf "$OUT"' EXIT
# The cache simulation (D1 and LL misses beside the instructions), its geometry pinned to this
# VM's caches as lscpu gives them (a core's L1d of 48 KiB, 12-way; the L3 of 32 MiB as the last
# level, 16-way; 64-byte lines) rather than valgrind's own reading of CPUID (an LL of 512 MiB
# here). One simulated cache serves every thread (valgrind runs one at a time): a line the
# device thread wrote is in it when the driver reads it, where a real NIC's DMA would have
# taken it out of the CPU's caches, so the misses are the working set's, not the NIC's.
CACHE=(--cache-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL=33554432,16,64)
VG=(valgrind --tool=callgrind --separate-threads=yes --fair-sched=yes "${CACHE[@]}")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPU(s), $(uname -r);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); DPDK $(dpkg-query -W -f '${Version}' librte-net-mlx5-23 2>/dev/null || echo '?')"
echo "cache simulation: ${CACHE[*]} (D1 = the L1 data cache, LL = the last level; r / w = read / write misses)"

# The Python half: reads one run's callgrind files (one per thread), finds the worker thread
# and the driver's functions, prints one JSON object.
cat >"$OUT/parse.py" <<'EOF'
import glob, json, re, subprocess, sys
tool, prefix = sys.argv[1], sys.argv[2]
# The events shown: instructions first (what every figure is), then the data-cache misses
# (D1 read, D1 write, LL read, LL write) beside them.
EVENTS = ['Ir', 'D1mr', 'D1mw', 'DLmr', 'DLmw']
LINE = re.compile(r'^\s*([\d,]+ \(.*?)\s+([*>])\s+(.*?)(?: \(([\d,]+)x\))?(?: \[(.*)\])?$')
def tree(path):
    out = subprocess.run(['callgrind_annotate', '--tree=calling', '--inclusive=yes',
                          '--threshold=100', '--show=' + ','.join(EVENTS), path],
                         capture_output=True, text=True).stdout
    incl, calls, cur = {}, {}, None
    for l in out.splitlines():
        m = LINE.match(l)
        if not m:
            continue
        # "1,234 (5.6%)" per event, "0" or "." for none
        cols = re.sub(r'\([^)]*\)', ' ', m[1]).split()
        if len(cols) != len(EVENTS) or not all(re.fullmatch(r'[\d,]+|\.', c) for c in cols):
            continue
        ev = [0 if c == '.' else int(c.replace(',', '')) for c in cols]
        kind, name, n, obj = m[2], m[3], m[4], m[5] or ''
        name = name.split(':', 1)[-1] if not name.startswith('???') else name[4:] + '@' + obj.rsplit('/', 1)[-1]
        if kind == '*':
            cur = name
            if ev[0] >= incl.get(name, [0])[0]:
                incl[name] = ev
        elif cur is not None:
            calls.setdefault(cur, []).append((name, ev, int(n.replace(',', '')) if n else 0))
    # instructions as before (ints); the misses in MISS[name] and the call tuples' 4th field
    miss = {k: v[1:] for k, v in incl.items()}
    return ({k: v[0] for k, v in incl.items()},
            {k: [(c, v[0], n, v[1:]) for (c, v, n) in cl] for k, cl in calls.items()}, miss)
def total(path):
    for l in open(path):
        if l.startswith('summary:') or l.startswith('totals:'):
            return int(l.split()[1])
best = None
for f in sorted(glob.glob(prefix + '-*')):
    incl, calls, miss = tree(f)
    if tool == 'rawq':
        # The caller of the queue's bursts: pktgen's tx_loop, or the thread function fwd's
        # `forward` is inlined into.
        keys = [k for k, cl in calls.items() if k in incl and any(
            re.search(r'DvQueue as rawq::queue::QueueOps>::(tx|rx)_burst$', c[0]) for c in cl)]
    else:
        keys = [k for k in calls if k.endswith('@dpdk-testpmd') and
                any(c[0].endswith('librte_net_mlx5.so.23.0') for c in calls[k])]
    if not keys:
        continue
    if tool == 'rawq':
        loop = max(keys, key=lambda k: incl[k])
    else:
        # testpmd's forwarding function: the caller of the PMD's burst functions with the most
        # cost on this thread (the main thread calls the PMD only in set-up).
        loop = max(keys, key=lambda k: sum(c[1] for c in calls[k]))
    if best is None or incl[loop] > best[1]:
        best = (f, incl[loop], incl, calls, loop, miss)
if best is None:
    sys.exit('no worker thread found in ' + prefix)
f, whole, incl, calls, loop, miss = best
sub = lambda a, b: [x - y for x, y in zip(a, b)]
add = lambda a, b: [x + y for x, y in zip(a, b)]
# 'misses': the data-cache misses [D1 read, D1 write, LL read, LL write] of the same parts
r = {'thread_file': f, 'loop': loop, 'whole': whole, 'driver': {}, 'app': {},
     'misses': {'whole': miss[loop], 'driver': {}}}
if tool == 'rawq':
    for k, v in incl.items():
        m = re.search(r'DvQueue as rawq::queue::QueueOps>::(tx_burst|rx_burst|alloc_burst|reclaim)$', k)
        if m:
            r['driver'][m[1]] = {'ir': v, 'calls': 0}
            r['misses']['driver'][m[1]] = miss[k]
    for (name, ir, n, ms) in calls.get(loop, []):
        # pktgen's settle (after the loop: waiting for the last completions) is left out.
        if name.endswith('pktgen::loops::settle'):
            r['whole'] -= ir
            r['misses']['whole'] = sub(r['misses']['whole'], ms)
        # pktgen --rx naps after 10000 empty polls (before the first frame, after the last):
        # time off the data path, not its instructions.
        if name.endswith('std::thread::functions::sleep'):
            r['whole'] -= ir
            r['misses']['whole'] = sub(r['misses']['whole'], ms)
    for (name, ir, n, ms) in sum(calls.values(), []):
        m = re.search(r'DvQueue as rawq::queue::QueueOps>::(tx_burst|rx_burst|alloc_burst|reclaim)$', name)
        if m:
            r['driver'][m[1]]['calls'] += n
        if re.search(r'write_udp$|measure::fill$', name):
            r['app']['frame writing (' + name.rsplit('::', 1)[-1] + ')'] = ir
else:
    for (name, ir, n, ms) in calls[loop]:
        if name.endswith('librte_net_mlx5.so.23.0'):
            r['driver'][name] = {'ir': ir, 'calls': n, 'callees': [c[:3] for c in calls.get(name, [])]}
            r['misses']['driver'][name] = ms
        else:
            r['app'][name] = {'ir': ir, 'calls': n}
print(json.dumps(r))
EOF

# Fits Ir = a * packets + c * calls over two runs; prints the per-packet figures.
cat >"$OUT/fit.py" <<'EOF'
import json, sys
label, burst = sys.argv[1], 32
runs = [json.loads(x) for x in sys.argv[2:4]]
def show(name, pts):
    # pts: [(ir, packets, calls)] of the two runs
    (i1, p1, c1), (i2, p2, c2) = pts
    raw = ', '.join('%.1f (%d calls / %d pkts)' % (i / p, c, p) for i, p, c in pts if p)
    det = p1 * c2 - p2 * c1
    if det and p1 and p2:
        a = (i1 * c2 - i2 * c1) / det
        c = (p1 * i2 - p2 * i1) / det
        fit = '%.1f per packet in full bursts (a %.1f + c %.1f / %d; an empty call %.1f)' % (
            a + c / burst, a, c, burst, c)
    else:
        fit = 'no fit (the two runs have the same share of empty calls)'
    print('  %-34s %s\n  %-34s raw: %s' % (name, fit, '', raw))
def fitted(pts):
    (i1, p1, c1), (i2, p2, c2) = pts
    det = p1 * c2 - p2 * c1
    if not (det and p1 and p2):
        return None
    return (i1 * c2 - i2 * c1) / det + (p1 * i2 - p2 * i1) / det / burst
print(label)
res = {}
for key in runs[0]['series']:
    pts = [tuple(r['series'][key]) for r in runs]
    if isinstance(pts[0][0], list):
        # data-cache misses [D1 r, D1 w, LL r, LL w]: the same fit, one event at a time
        per = [fitted([(i[k], p, c) for i, p, c in pts]) for k in range(4)]
        res[key] = per
        raw = ' / '.join('D1 %.2f r %.2f w, LL %.2f r %.2f w' % tuple(x / p for x in i) for i, p, c in pts if p)
        print('  %-34s %s\n  %-34s raw: %s' % (key, 'no fit' if None in per else
              'D1 %.2f r + %.2f w, LL %.2f r + %.2f w a packet in full bursts' % tuple(per), '', raw))
    else:
        res[key] = fitted(pts)
        show(key, pts)
if len(sys.argv) > 4:  # the fitted figures, for the side-by-side table
    json.dump(res, open(sys.argv[4], 'w'))
EOF

# Prints the data-cache misses a packet of rawq ($1) and testpmd ($2) side by side: JSON files
# {part: [D1 r, D1 w, LL r, LL w]}, the same method for both ($3 says which).
cat >"$OUT/misses.py" <<'EOF'
import json, sys
a, b, how = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
f = lambda v: '-' if v is None or None in v else '%5.2f %5.2f | %5.2f %5.2f' % tuple(v)
print('  data-cache misses a packet (%s):' % how)
print('  %-30s %-27s %s' % ('', 'rawq: D1 r   w | LL r   w', 'testpmd: D1 r   w | LL r   w'))
for k in a:
    if k in b:
        print('  %-30s %-27s %s' % (k, f(a[k]), f(b[k])))
EOF

# DPDK's receive figure from per-instruction counts (docs/performance.md: "How DPDK's receive figure was
# found"): per packet = (I - e * C_empty - paths) / N, where I is the rx burst function's
# inclusive cost, e an empty call's cost (the run with nothing generated), C_empty the calls
# testpmd found empty, and paths the bound on what the empty calls' data-dependent paths in the
# CQE scan added or saved.
cat >"$OUT/rxcost.py" <<'EOF'
# DPDK's receive cost a packet from per-instruction callgrind counts (--dump-instr=yes) of a
# run with frames (argv[1]: its parse JSON) and one with nothing generated (argv[2]); N = argv[3].
import json, re, sys
pa, pz, N = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
def counts(path):
    """{function name: {address: executions}} and call sites [(caller, address, callee, n)]."""
    names, fns, sites, fn, addr, call = {}, {}, [], None, 0, None
    for l in open(path):
        m = re.match(r'(c?fn)=\((\d+)\)(?: (.*))?', l)
        if m:
            if m[3]:
                names[m[2]] = m[3]
            if m[1] == 'fn':
                fn = names[m[2]]
            else:
                callee = names[m[2]]
            continue
        if l.startswith('calls='):
            call = (int(l.split()[0][6:]), callee)
            continue
        if not l or l[0] not in '0123456789+-*':
            continue
        t = l.split()
        p = t[0]
        addr = int(p, 16) if p.startswith('0x') else addr + int(p) if p[0] in '+-' else addr
        if call:
            sites.append((fn, addr, call[1], call[0]))
            call = None
        elif len(t) >= 3 and fn:
            f = fns.setdefault(fn, {})
            f[addr] = f.get(addr, 0) + int(t[2])
    return fns, sites
(ra, sa), (rz, sz) = counts(pa['thread_file']), counts(pz['thread_file'])
burst, d = max(pa['driver'].items(), key=lambda kv: kv[1]['calls'])
raw = burst.split('@')[0]
ir, calls = d['ir'], d['calls']
iz, cz = [(v['ir'], v['calls']) for k, v in pz['driver'].items() if k.split('@')[0] == raw][0]
e = round(iz / cz)
# Non-empty calls: the first instruction after testpmd's call of the burst that ran fewer times.
loop = pa['loop'].split('@')[0]
site = [a for (f, a, c, n) in sa if f == loop and c == raw][0]
fwd = ra[loop]
nonempty = next(fwd[a] for a in sorted(fwd) if a > site and fwd[a] < calls)
empty = calls - nonempty
# The burst function's callee called on (nearly) every call: the CQE scan.
scan = max((c for (f, a, c, n) in sa if f == raw), key=lambda c: sum(n for (f, a, cc, n) in sa if f == raw and cc == c))
k = sum(n for (f, a, c, n) in sa if f == raw and c == scan)
kz = sum(n for (f, a, c, n) in sz if f == raw and c == scan)
knon = k - empty  # scans made by non-empty calls
idle = {a for a, n in rz[scan].items() if n >= kz - 1}
lo = hi = 0
for a, n in ra[scan].items():
    if a in idle:  # skipped by up to k - n calls, at most knon of them non-empty
        lo -= k - n
        hi -= max(0, k - n - knon)
    else:          # run n times, at most knon of them in non-empty calls
        lo += max(0, n - knon)
        hi += n
# The burst function's own idle path: every one of its instructions must have run in every
# empty call (else an empty call left it, which this does not count).
own_idle = {a for a, n in rz[raw].items() if n >= cz - 1}
ok = all(ra[raw].get(a, 0) >= empty for a in own_idle)
per = lambda dd: (ir - e * empty - dd) / N
print('  DPDK rx burst (%s): %d calls, %d not empty (testpmd\'s branch after the burst), %.1f packets a'
      ' non-empty burst; an empty call %d instructions (idle run: %d calls, %d instructions);'
      ' its CQE scan %s: %d calls, %d in non-empty calls; data-dependent paths of the empty calls'
      ' %+d to %+d instructions%s' % (raw, calls, nonempty, N / nonempty, e, cz, iz, scan, k, knon,
                                      lo, hi, '' if ok else ' (WARNING: an empty call left the idle path)'))
print('  (I - e * calls) / packets would say %.1f: the subtraction without those counts)' % ((ir - e * calls) / N))
print('  DPDK rx driver: %.1f to %.1f instructions a packet ((I - e * empty calls - paths) / packets)'
      % (per(hi), per(lo)))
if len(sys.argv) > 4:  # the io mode's iocost.py takes the counts from here
    json.dump({'e': e, 'empty': empty, 'nonempty': nonempty, 'lo': lo, 'hi': hi, 'ok': ok},
              open(sys.argv[4], 'w'))
EOF

# The data-cache misses a packet of one run with nothing subtracted (rx and io: testpmd's
# empty calls defeat a fit, and its receive figure is exact instead; the misses of every call
# are divided by the packets, for both tools alike): parse JSON $1, packets $2, out JSON $3.
cat >"$OUT/rawmiss.py" <<'EOF'
import json, sys
p, n = json.load(open(sys.argv[1])), int(sys.argv[2])
d = p['misses']['driver']
tot = lambda vs: [sum(v[k] for v in vs) for k in range(4)]
if any(k.endswith('.so.23.0') for k in d):
    # testpmd: its rx burst is the PMD function called most, the tx burst the other(s)
    rx = max(p['driver'], key=lambda k: p['driver'][k]['calls'])
    parts = {'rx burst': d[rx], 'tx burst': tot([v for k, v in d.items() if k != rx])}
else:
    z = [0] * 4
    parts = {'rx burst': d.get('rx_burst', z), 'tx burst': tot([d.get('tx_burst', z), d.get('reclaim', z)])}
out = {k: [x / n for x in v] for k, v in parts.items() if any(v)}
out['driver'] = [x / n for x in tot(list(parts.values()))]
out['whole thread'] = [x / n for x in p['misses']['whole']]
json.dump(out, open(sys.argv[3], 'w'))
EOF

# Waits (bounded) until file $1 contains $2.
wait_for() {
  local i
  for i in $(seq 1200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.5; done
  echo "bench: timed out waiting for '$2' in $1" >&2; tail -20 "$1" >&2; return 1
}

# rawq tx run $1 (tag) with ring $2; prints the run's JSON (series: name -> [ir, pkts, calls]).
rawq_tx() {
  local tag=$1 ring=$2 n=100000
  RAWQ_EMU_STATS=$OUT/$tag.emu bash scripts/emu.sh -- "${VG[@]}" --callgrind-out-file="$OUT/$tag.out" \
    "$PKTGEN" -b dv -d mlx5_0 -s 60 -n $n --burst 32 --ring "$ring" --json \
    >"$OUT/$tag.json" 2>"$OUT/$tag.log" || { tail "$OUT/$tag.log" >&2; return 1; }
  python3 "$OUT/parse.py" rawq "$OUT/$tag.out" >"$OUT/$tag.parse"
  python3 - "$OUT/$tag.json" "$OUT/$tag.parse" "$OUT/$tag.emu" <<'EOF'
import json, re, sys
j, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
emu = open(sys.argv[3]).read()
frames = int(re.search(r'tx_frames: (\d+)', emu)[1])
pk, calls = j['packets'], j['tx_bursts']
d = p['driver']
drv = d['tx_burst']['ir'] + d.get('alloc_burst', {'ir': 0})['ir']
print(json.dumps({'pkts': pk, 'device_frames': frames, 'calls': calls, 'series': {
    'driver: tx_burst (+ completions, free)': [d['tx_burst']['ir'], pk, calls],
    'driver: buffer allocation (alloc_burst)': [d.get('alloc_burst', {'ir': 0})['ir'], pk, calls],
    'whole sender thread (tx_loop)': [p['whole'], pk, calls],
    'application (whole - driver)': [p['whole'] - drv, pk, calls],
    'misses: driver': [[x + y for x, y in zip(p['misses']['driver']['tx_burst'],
                        p['misses']['driver'].get('alloc_burst', [0] * 4))], pk, calls],
    'misses: whole thread': [p['misses']['whole'], pk, calls]},
    'notes': {'thread': p['thread_file'].rsplit('-', 1)[-1], 'app': p['app']}}))
EOF
}

# testpmd run $1 (tag) in forward mode $2 with $3 descriptors a ring; testpmd's command $4
# starts it (start / start tx_first).
dpdk_run() {
  local tag=$1 mode=$2 desc=$3 start=$4
  mkfifo "$OUT/$tag.in"
  cat >"$OUT/$tag.vg" <<EOF
#!/bin/sh
exec ${VG[*]} ${VG_EXTRA:-} --callgrind-out-file=$OUT/$tag.out /usr/bin/dpdk-testpmd "\$@"
EOF
  chmod +x "$OUT/$tag.vg"
  # shellcheck disable=SC2086 # TPEMU_EXTRA: testpmd-emu.sh's own options (io: --pair --only-first)
  DPDK_TESTPMD=$OUT/$tag.vg RAWQ_EMU_STATS=$OUT/$tag.emu RAWQ_EMU_RXGEN_START=$OUT/$tag.go bash scripts/testpmd-emu.sh ${TPEMU_EXTRA:-} --mem 512 \
    --devargs "$DEVARGS" --eal --log-level=pmd.net.mlx5:debug -- -i --forward-mode="$mode" \
    --total-num-mbufs=32768 --txd="${TXD:-$desc}" --rxd="$desc" --burst=32 --txpkts=64 \
    --record-burst-stats ${TESTPMD_EXTRA:-} <"$OUT/$tag.in" >"$OUT/$tag.log" 2>&1 &
  local pid=$!
  exec 7>"$OUT/$tag.in"
  wait_for "$OUT/$tag.log" 'testpmd> ' || { exec 7>&-; wait $pid; return 1; }
  echo "$start" >&7
  touch "$OUT/$tag.go" # the frame source (if any) starts now (RAWQ_EMU_RXGEN_START)
  wait_for "$OUT/$tag.log" 'Start automatic\|Starting\|start' || true
  if [[ -n ${RXGEN_COUNT:-} ]]; then
    # rx: until the generator is done and the device has taken all of it (then a moment for
    # the last ring to be polled: testpmd's counts are read when it stops).
    wait_generated "$OUT/$tag.emu" "$RXGEN_COUNT" && sleep 3
  else
    sleep "$SECS" # the window: testpmd forwards until told to stop
  fi
  # testpmd's stdout is a file here (fully buffered): its statistics appear when it exits, so
  # stop and quit go together (it runs them in order).
  printf 'stop\nquit\n' >&7
  exec 7>&-
  wait $pid || true
  python3 "$OUT/parse.py" dpdk "$OUT/$tag.out" >"$OUT/$tag.parse"
}

# The JSON of a testpmd run $1 (tag), packets counted from direction $2 (TX|RX).
dpdk_series() {
  python3 - "$OUT/$1.log" "$OUT/$1.parse" "$OUT/$1.emu" "$2" <<'EOF'
import json, re, sys
log, p, emu, dirn = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), open(sys.argv[3]).read(), sys.argv[4]
acc = log[log.index('Accumulated forward statistics'):]
pk = int(re.search(dirn + r'-packets: *(\d+)', acc)[1])
frames = int(re.search(r'tx_frames: (\d+)', emu)[1])
# rx: the device's received frames, and the frame source's count beside its drops.
extra = {}
if dirn == 'RX':
    frames = int(re.search(r' rx_frames: (\d+)', emu)[1])
    g = re.search(r' generated: (\d+)', emu)
    if g:
        c = lambda k: int(re.search(r' %s: (\d+)' % k, emu)[1])
        extra = {'generated': int(g[1]), 'no_buffer': c('rx_no_buffer'), 'to_kernel': c('rx_to_kernel'),
                 'netdev_tx': c('netdev_tx'), 'wire_drops': c('wire_drops')}
drv = sorted(p['driver'].items(), key=lambda kv: -kv[1]['ir'])
# The burst call: the PMD function called most often from the forwarding function.
burst = max(p['driver'].values(), key=lambda v: v['calls'])['calls'] if drv else 0
dsum = sum(v['ir'] for _, v in drv)
print(json.dumps({'pkts': pk, 'device_frames': frames, 'calls': burst, **extra, 'series': {
    'driver: PMD burst functions': [dsum, pk, burst],
    'whole forwarding lcore': [p['whole'], pk, burst],
    'application (whole - driver)': [p['whole'] - dsum, pk, burst],
    'misses: driver': [[sum(v[k] for v in p['misses']['driver'].values()) for k in range(4)], pk, burst],
    'misses: whole thread': [p['misses']['whole'], pk, burst]},
    'notes': {'thread': p['thread_file'].rsplit('-', 1)[-1], 'forwarding function': p['loop'],
              'PMD functions': {k: v for k, v in drv},
              'app callees': p['app']}}))
EOF
}

# Waits (bounded: 20 min) until the stats file $1 says the frame source made its $2 frames and
# the device took them all (received into an RQ or dropped, counted), beside what the port's
# kernel netdev sent (testpmd's TAP: looped back, it arrives too, or the full wire drops it;
# with PAIR=1 it goes to mlx5_1 instead).
wait_generated() {
  local i
  for i in $(seq 2400); do
    PAIR=${PAIR:-0} python3 - "$1" "$2" <<'EOF' && return 0
import os, re, sys
try:
    t = open(sys.argv[1]).read()
except OSError:
    sys.exit(1)
def c(k):
    m = re.search(r' %s: (\d+)' % k, t)
    return int(m[1]) if m else -1
done = re.search(r'rawq-emu rxgen: .*done: true', t) is not None
took = c('rx_frames') + c('rx_no_buffer') + c('rx_to_kernel') + c('rx_rule_drop') + c('wire_drops')
if os.environ['PAIR'] != '1':
    sys.exit(0 if done and took == int(sys.argv[2]) + c('netdev_tx') else 1)
# --pair: the TAP's frames go to mlx5_1 (a frame of them may come back); the counts are checked
# over both devices afterwards (io_counts)
sys.exit(0 if done and took >= int(sys.argv[2]) else 1)
EOF
    sleep 0.5
  done
  echo "bench: the frame source's $2 frames did not all arrive; $(cat "$1" 2>/dev/null)" >&2
  return 1
}

# Says whether a run's counts add up: the tool's == the device's received frames (and, with
# the frame source, those == generated, no-buffer drops included).
check_counts() { # $1: run JSON
  python3 -c '
import json, sys
j = json.loads(sys.argv[1])
ok = j["pkts"] == j["device_frames"]
msg = "%d counted by the tool, %d by the device" % (j["pkts"], j["device_frames"])
if "generated" in j:
    ok = ok and j["generated"] + j["netdev_tx"] == j["device_frames"] + j["no_buffer"] + j["to_kernel"] + j["wire_drops"]
    msg += ", %d generated (+ %d from the kernel netdev), %d no-buffer drops, %d to the kernel, %d lost on the wire" % (
        j["generated"], j["netdev_tx"], j["no_buffer"], j["to_kernel"], j["wire_drops"])
print("  counts %s: %s" % ("add up" if ok else "DO NOT add up", msg))' "$1"
}

report_notes() { # $1: run JSON
  python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("  run: %d packets counted by the tool, %d frames sent by the emulated device, %d burst calls; %s" % (j["pkts"], j["device_frames"], j["calls"], json.dumps(j["notes"])))' "$1"
}

if [[ ,$MODES, == *,tx,* ]]; then
  echo
  echo "== transmit only: 60-byte UDP frames (64 on the wire with FCS), burst 32 =="
  A=$(rawq_tx rawq-tx-a 8192) B=$(rawq_tx rawq-tx-b 256)
  python3 "$OUT/fit.py" "rawq pktgen -b dv (eMPW; rings of 8192 and 256):" "$A" "$B" "$OUT/rawq-tx.fit"
  report_notes "$A"; report_notes "$B"
  dpdk_run dpdk-tx-a txonly 4096 start
  dpdk_run dpdk-tx-b txonly 512 start
  A=$(dpdk_series dpdk-tx-a TX) B=$(dpdk_series dpdk-tx-b TX)
  python3 "$OUT/fit.py" "dpdk-testpmd txonly, mlx5 PMD ($DEVARGS; rings of 4096 and 512):" "$A" "$B" "$OUT/dpdk-tx.fit"
  report_notes "$A"; report_notes "$B"
  echo "  the PMD's choice: $(grep -h -A1 'selected Tx function' "$OUT/dpdk-tx-a.log" | tr -s '\t\n' '  ')"
  echo "  its settings: $(grep -h -o '"txq_[a-z_]*" is [-0-9]*\|"rxq_cqe_comp_en" is [0-9]*' "$OUT/dpdk-tx-a.log" | tr '\n' ' ')"
  if [[ -f $OUT/rawq-tx.fit && -f $OUT/dpdk-tx.fit ]]; then
    for t in rawq dpdk; do
      python3 -c 'import json, sys; a = json.load(open(sys.argv[1])); json.dump({"driver": a["misses: driver"], "whole thread": a["misses: whole thread"]}, open(sys.argv[2], "w"))' \
        "$OUT/$t-tx.fit" "$OUT/$t-tx.misses"
    done
    python3 "$OUT/misses.py" "$OUT/rawq-tx.misses" "$OUT/dpdk-tx.misses" "each tool's two-run fit, as its instructions"
  fi
fi

# rawq rx run $1 (tag) with ring $2, fed $RXGEN_COUNT generated frames; prints the run's JSON.
rawq_rx() {
  local tag=$1 ring=$2
  RAWQ_EMU_PAUSE=1 RAWQ_EMU_RXGEN=$RXGEN_COUNT RAWQ_EMU_STATS=$OUT/$tag.emu bash scripts/emu.sh -- \
    "${VG[@]}" --callgrind-out-file="$OUT/$tag.out" \
    "$PKTGEN" -b dv -d mlx5_0 --rx --burst 32 --ring "$ring" --json \
    >"$OUT/$tag.json" 2>"$OUT/$tag.log" &
  local pid=$!
  wait_generated "$OUT/$tag.emu" "$RXGEN_COUNT" && sleep 3
  kill -TERM $pid 2>/dev/null || true
  wait $pid || true # emu.sh answers SIGTERM with 143 once pktgen has stopped
  python3 "$OUT/parse.py" rawq "$OUT/$tag.out" >"$OUT/$tag.parse"
  python3 - "$OUT/$tag.json" "$OUT/$tag.parse" "$OUT/$tag.emu" <<'EOF'
import json, re, sys
j, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
emu = open(sys.argv[3]).read()
c = lambda k: int(re.search(r' %s: (\d+)' % k, emu)[1])
pk = j['packets']
d = p['driver']
calls = d['rx_burst']['calls']
print(json.dumps({'pkts': pk, 'device_frames': c('rx_frames'), 'calls': calls,
    'generated': c('generated'), 'no_buffer': c('rx_no_buffer'), 'to_kernel': c('rx_to_kernel'),
    'netdev_tx': c('netdev_tx'), 'wire_drops': c('wire_drops'), 'series': {
    'driver: rx_burst (+ refill, metadata)': [d['rx_burst']['ir'], pk, calls],
    'whole receive thread': [p['whole'], pk, calls],
    'application (whole - driver)': [p['whole'] - d['rx_burst']['ir'], pk, calls]},
    'notes': {'thread': p['thread_file'].rsplit('-', 1)[-1]}}))
EOF
}

if [[ ,$MODES, == *,rx,* ]]; then
  echo
  echo "== receive only: 60-byte UDP frames from the emulator's frame source, burst 32 =="
  export RXGEN_COUNT=${RXGEN_COUNT:-200000}
  if [[ ,$SIDES, == *,rawq,* ]]; then
  A=$(rawq_rx rawq-rx-a 8192) B=$(rawq_rx rawq-rx-b 1024)
  python3 "$OUT/fit.py" "rawq pktgen -b dv --rx (cyclic RQ, CQE compression; rings of 8192 and 1024):" "$A" "$B"
  report_notes "$A"; report_notes "$B"
  check_counts "$A"; check_counts "$B"
  python3 "$OUT/rawmiss.py" "$OUT/rawq-rx-a.parse" \
    "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["pkts"])' "$A")" "$OUT/rawq-rx.misses"
  fi
  if [[ ,$SIDES, == *,dpdk,* ]]; then
  # --no-flush-rx: testpmd's start otherwise drains and discards what its RQs hold (frames
  # the source put there while testpmd read its start command).
  # --dump-instr=yes: per-instruction counts, from which docs/performance.md's DPDK receive figure is
  # derived (how many bursts were not empty: testpmd's branch after the burst; which calls
  # took the burst function's data-dependent paths).
  VG_EXTRA=--dump-instr=yes TESTPMD_EXTRA=--no-flush-rx RAWQ_EMU_PAUSE=1 RAWQ_EMU_RXGEN=$RXGEN_COUNT \
    dpdk_run dpdk-rx-a rxonly 4096 start
  # The same with nothing generated: (nearly) every rx burst is empty, which gives what an
  # empty call costs (a two-run fit cannot: testpmd's 99 % of empty calls drown it).
  VG_EXTRA=--dump-instr=yes RXGEN_COUNT= dpdk_run dpdk-rx-z rxonly 4096 start
  A=$(dpdk_series dpdk-rx-a RX) Z=$(dpdk_series dpdk-rx-z RX)
  report_notes "$A"; report_notes "$Z"
  check_counts "$A"
  python3 "$OUT/rxcost.py" "$OUT/dpdk-rx-a.parse" "$OUT/dpdk-rx-z.parse" \
    "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["pkts"])' "$A")"
  echo "  the PMD's choice: $(grep -h 'selected.*Rx function\|Rx burst\|rx_burst' "$OUT/dpdk-rx-a.log" | sort -u | head -3 | tr -s '\t\n' '  ')"
  # testpmd's lcore never naps (pktgen --rx does after 10000 empty polls): under valgrind it
  # keeps the CPU from the device and the source, and polls an empty RQ most of its turns.
  echo "  testpmd's own burst statistics: $(grep -h 'RX-bursts' "$OUT/dpdk-rx-a.log" "$OUT/dpdk-rx-z.log" | tr -s ' \n' '  ')"
  python3 "$OUT/rawmiss.py" "$OUT/dpdk-rx-a.parse" \
    "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["pkts"])' "$A")" "$OUT/dpdk-rx.misses"
  fi
  if [[ -f $OUT/rawq-rx.misses && -f $OUT/dpdk-rx.misses ]]; then
    python3 "$OUT/misses.py" "$OUT/rawq-rx.misses" "$OUT/dpdk-rx.misses" \
      "every call's misses over the packets, nothing subtracted, for both; rawq's ring of 8192"
  fi
  unset RXGEN_COUNT
fi

# io forwarding's cost per forwarded packet from exact counts (docs/performance.md "How the io figures are
# counted"): per packet = (I - e * C_empty) / N for each part, where I is the part's inclusive
# cost on the forwarding thread, C_empty the rounds whose rx burst found nothing (rx burst
# calls - tx burst calls: both tools call tx only after a non-empty rx), e what one empty round
# costs that part (the run with nothing generated: its cost / its rx calls) and N the packets
# forwarded. rawq's functions are named in the call graph; DPDK's (stripped) are the
# librte_net_mlx5 functions its forwarding function calls, the rx burst the one called most.
cat >"$OUT/iocost.py" <<'EOF'
import json, re, sys
tool, pa, pz, N = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4])
def read(path):
    """Own instruction counts {fn: {address: executions}} and call sites
    [(caller, address, callee, calls, inclusive Ir)] of a --dump-instr=yes callgrind file."""
    names, own, sites, fn, callee, call, addr = {}, {}, [], None, None, None, 0
    for l in open(path):
        m = re.match(r'(c?fn)=\((\d+)\)(?: (.*))?', l)
        if m:
            if m[3]:
                names[m[2]] = m[3].strip()
            if m[1] == 'fn':
                fn = names[m[2]]
            else:
                callee = names[m[2]]
            continue
        if l.startswith('calls='):
            call = (int(l.split()[0][6:]), callee)
            continue
        if not l or l[0] not in '0123456789+-*':
            continue
        t = l.split()
        p = t[0]
        addr = int(p, 16) if p.startswith('0x') else addr + int(p) if p[0] in '+-' else addr
        if call:
            sites.append((fn, addr, call[1], call[0], int(t[2]) if len(t) >= 3 else 0))
            call = None
        elif len(t) >= 3 and fn:
            f = own.setdefault(fn, {})
            f[addr] = f.get(addr, 0) + int(t[2])
    return own, sites
def parts(p):
    own, sites = read(p['thread_file'])
    loop = p['loop'].split('@')[0] if tool == 'dpdk' else next(
        n for n in own if n == p['loop'] or n.endswith(p['loop']))
    out = {}
    for (f, a, c, n, ir) in sites:
        if f != loop:
            continue
        if tool == 'rawq':
            m = re.search(r'QueueOps>::(rx_burst|tx_burst|reclaim)$', c)
            key = m[1] if m else None
        else:
            key = c if c.startswith('0x') and c.split('@')[0] in {k.split('@')[0] for k in p['driver']} else None
        if key:
            d = out.setdefault(key, [0, 0])
            d[0] += ir
            d[1] += n
    if tool == 'dpdk':
        # rx: the PMD function called most; tx: the other(s)
        rx = max(out, key=lambda k: out[k][1])
        out = {'rx_burst': out[rx], 'tx_burst': [sum(v[0] for k, v in out.items() if k != rx),
                                                  sum(v[1] for k, v in out.items() if k != rx)],
               'rx_fn': rx}
        # the whole thread: the forwarding function over all its calls, and its caller's own
        # instructions (testpmd's lcore loop: streams, the stop flag)
        inc = sum(ir for (f, a, c, n, ir) in sites if c == loop)
        callers = {f for (f, a, c, n, ir) in sites if c == loop}
        out['whole'] = inc + sum(sum(own.get(f, {}).values()) for f in callers)
    else:
        out['whole'] = p['whole']
        out['rx_fn'] = next(c for (f, a, c, n, ir) in sites if f == loop and c.endswith('::rx_burst'))
        # --rx-mode interrupt: fwd sleeps after an empty round (rx_wait_any: arm, re-check,
        # wait on the completion channel); called in empty rounds only
        out['sleep'] = [sum(ir for (f, a, c, n, ir) in sites if f == loop and c.endswith('rx_wait_any')),
                        sum(n for (f, a, c, n, ir) in sites if f == loop and c.endswith('rx_wait_any'))]
    out.setdefault('tx_burst', [0, 0])
    out.setdefault('reclaim', [0, 0])
    return out, own
# DPDK: the empty calls' cost and their data-dependent paths from rxcost.py (argv[6])
rc = json.load(open(sys.argv[6])) if len(sys.argv) > 6 else None
a, owna = parts(pa)
z, ownz = parts(pz)
C, Cz = a['rx_burst'][1], z['rx_burst'][1]
Cnon = a['tx_burst'][1]
E = C - Cnon
e = lambda k: z[k][0] / Cz
out = []
say = out.append
say('  rx burst (%s): %d calls, %d not empty (= tx burst calls), %d empty (%.2f %%), %.1f packets a'
    ' non-empty burst; idle run: %d calls, %d tx calls' % (
        a['rx_fn'], C, Cnon, E, 100.0 * E / C, N / max(Cnon, 1), Cz, z['tx_burst'][1]))
if tool == 'rawq':
    say('  reclaim (fwd calls it after an empty rx): %d calls (empty rounds + 1 at the end: %s)' % (
        a['reclaim'][1], 'matches' if a['reclaim'][1] == E + 1 else 'DOES NOT match'))
# every instruction of the rx function's idle path (run in every idle call) must have run in
# every empty call of the measured run: else an empty call left the idle path
rf = a['rx_fn'].split('@')[0]
idle = {ad for ad, n in ownz.get(rf, {}).items() if n >= Cz - 1}
short = [ad for ad in idle if owna.get(rf, {}).get(ad, 0) < E]
say('  the rx burst\'s idle path: %d instructions (%.1f a call in the idle run), %s' % (
    len(idle), z['rx_burst'][0] / Cz,
    'each run at least once per empty call in the measured run' if not short else
    'WARNING: %d of them ran fewer times than there were empty calls' % len(short)))
fig = {}
lo = hi = 0
if rc:
    say('  rxcost.py: %d empty calls (testpmd\'s branch after the burst; %s), an empty call %d; data-dependent'
        ' paths of the empty calls %+d to %+d instructions' % (
            rc['empty'], 'the same count' if rc['empty'] == E else 'NOT the count above', rc['e'], rc['lo'], rc['hi']))
    lo, hi = rc['lo'], rc['hi']
fig['rx'] = (a['rx_burst'][0] - e('rx_burst') * E - hi) / N
fig['rx_hi'] = (a['rx_burst'][0] - e('rx_burst') * E - lo) / N
fig['tx'] = (a['tx_burst'][0] + a['reclaim'][0] - (e('reclaim') * (a['reclaim'][1]) if tool == 'rawq' else 0)) / N
sl = a.get('sleep', [0, 0])
if sl[1]:
    say('  fwd slept %d times (rx_wait_any, %.0f instructions a sleep: left out, with an empty round\'s'
        ' cost for each)' % (sl[1], sl[0] / sl[1]))
fig['whole'] = (a['whole'] - sl[0] - z['whole'] / Cz * E - hi) / N
fig['whole_hi'] = (a['whole'] - sl[0] - z['whole'] / Cz * E - lo) / N
fig['whole_raw'] = a['whole'] / N
fig['loop'] = fig['whole'] - fig['rx'] - fig['tx']
rng = lambda k: '%.1f' % fig[k] if abs(fig[k + '_hi'] - fig[k]) < 0.05 else '%.1f to %.1f' % (fig[k], fig[k + '_hi'])
say('  an empty round: rx burst %.1f, %swhole %.1f instructions (idle run)' % (
    e('rx_burst'), 'reclaim %.1f, ' % (z['reclaim'][0] / max(z['reclaim'][1], 1)) if tool == 'rawq' else '',
    z['whole'] / Cz))
say('  per forwarded packet (%d): rx burst incl. refill %s; tx burst incl. completions%s %.1f;'
    ' driver %s; the loop around it %.1f; WHOLE FORWARDING THREAD %s' % (
        N, rng('rx'), ' (+ reclaim beyond an empty one)' if tool == 'rawq' else '', fig['tx'],
        '%.1f' % (fig['rx'] + fig['tx']) if abs(fig['rx_hi'] - fig['rx']) < 0.05 else
        '%.1f to %.1f' % (fig['rx'] + fig['tx'], fig['rx_hi'] + fig['tx']), fig['loop'], rng('whole')))
say('  (nothing subtracted, every instruction of the thread counted as the packets\': %.1f)' % fig['whole_raw'])
print('\n'.join(out))
print(json.dumps(fig), file=open(sys.argv[5], 'w'))
EOF

# Says whether an io run's counts add up: generated (+ the TAP's) = mlx5_0's rx_frames + drops;
# the tool's received = rx_frames; the tool's sent = mlx5_0's tx_frames; mlx5_1 (the cable's
# far end, no receiver) took mlx5_0's tx_frames (+ its TAP's frames): $1 emu file, $2 tool rx,
# $3 tool tx.
io_counts() {
  python3 - "$1" "$2" "$3" <<'EOF'
import re, sys
t, t1 = open(sys.argv[1]).read(), open(sys.argv[1] + '.mlx5_1').read()
rx, tx = int(sys.argv[2]), int(sys.argv[3])
c = lambda k, s=t: int(re.search(r' %s: (\d+)' % k, s)[1])
gen = int(re.search(r' generated: (\d+)', t)[1]) if 'generated:' in t else 0
far = c('rx_frames', t1) + c('rx_to_kernel', t1) + c('rx_no_buffer', t1) + c('wire_drops', t1)
near = c('rx_frames') + c('rx_no_buffer') + c('rx_to_kernel') + c('wire_drops')
# what went onto the cable (generated, mlx5_0's sends and its TAP's) = what both ends took
ok = [gen + c('tx_frames') + c('netdev_tx') + c('netdev_tx', t1) == near + far,
      rx == c('rx_frames'), tx == c('tx_frames'), far >= c('tx_frames')]
print('  counts %s: %d generated, mlx5_0 took %d (%d received, %d no-buffer, %d to the kernel, %d lost'
      ' on the wire); the tool received %d and forwarded %d; mlx5_0 sent %d (+ %d from its TAP);'
      ' mlx5_1 took %d (%d of them into an RQ: nothing receives there)'
      % ('add up' if all(ok) else 'DO NOT add up (%s)' % ok, gen, near, c('rx_frames'), c('rx_no_buffer'),
         c('rx_to_kernel'), c('wire_drops'), rx, tx, c('tx_frames'), c('netdev_tx'), far,
         c('rx_frames', t1)))
EOF
}

# rawq fwd io run $1 (tag), fed $2 generated frames (0: none, an idle run of $IDLE_SECS).
rawq_io() {
  local tag=$1 gen=$2
  local g=()
  ((gen > 0)) && g=(RAWQ_EMU_RXGEN="$gen")
  env "${g[@]}" RAWQ_EMU_PAUSE=1 RAWQ_EMU_STATS="$OUT/$tag.emu" bash scripts/emu.sh --pair -- \
    "${VG[@]}" --dump-instr=yes --callgrind-out-file="$OUT/$tag.out" \
    "$FWD" -b dv -d mlx5_0 --mode io --burst 32 --ring 1024 --rx-mode "${RXMODE:-poll}" \
    --rule 'udp dst-port 9000 -> queue 0' --quiet --json >"$OUT/$tag.json" 2>"$OUT/$tag.log" &
  local pid=$!
  if ((gen > 0)); then
    wait_generated "$OUT/$tag.emu" "$gen" && sleep 3
  else
    wait_for "$OUT/$tag.log" 'fwd: mlx5_0' && sleep "$IDLE_SECS"
  fi
  kill -TERM $pid 2>/dev/null || true
  wait $pid || true
  python3 "$OUT/parse.py" rawq "$OUT/$tag.out" >"$OUT/$tag.parse"
}

if [[ ,$MODES, == *,io,* ]]; then
  echo
  echo "== io forwarding: generated frames into mlx5_0, forwarded out of it (rx 0 -> tx 0) to mlx5_1 (--pair, nothing receiving there) =="
  IO_COUNT=${IO_COUNT:-200000} IDLE_SECS=${IDLE_SECS:-10} PAIR=1
  if [[ ,$SIDES, == *,rawq,* ]]; then
  RXMODE=interrupt rawq_io rawq-io-a "$IO_COUNT"
  rawq_io rawq-io-z 0
  read -r RX TX < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); p=j["ports"][0]; print(p["rx"]["packets"], p["tx"]["packets"])' "$OUT/rawq-io-a.json")
  echo "rawq fwd -b dv --mode io (ring 1024, burst 32, flow control on):"
  python3 "$OUT/iocost.py" rawq "$OUT/rawq-io-a.parse" "$OUT/rawq-io-z.parse" "$TX" "$OUT/rawq-io.fig"
  io_counts "$OUT/rawq-io-a.emu" "$RX" "$TX"
  echo "  fwd's drops: $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["ports"][0]["drops"]))' "$OUT/rawq-io-a.json")"
  python3 "$OUT/rawmiss.py" "$OUT/rawq-io-a.parse" "$TX" "$OUT/rawq-io.misses"
  fi
  if [[ ,$SIDES, == *,dpdk,* ]]; then
  # The same for testpmd: mlx5_0 alone given to the PMD (one port: io forwards it to itself).
  export TPEMU_EXTRA="--pair --only-first"
  # A tx ring of 2048 (the rx ring 1024): with 1024, under valgrind, testpmd dropped 1.4-2.3 %
  # of its frames (its tx ring fills while the device thread waits for its turn; io drops what
  # the ring does not take), whose freeing would count as forwarding cost.
  VG_EXTRA=--dump-instr=yes TESTPMD_EXTRA=--no-flush-rx RAWQ_EMU_PAUSE=1 RAWQ_EMU_RXGEN=$IO_COUNT \
    RXGEN_COUNT=$IO_COUNT TXD=2048 dpdk_run dpdk-io-a io 1024 start
  VG_EXTRA=--dump-instr=yes RAWQ_EMU_PAUSE=1 SECS=$IDLE_SECS TXD=2048 dpdk_run dpdk-io-z io 1024 start
  unset TPEMU_EXTRA
  read -r RX TX < <(python3 -c '
import re, sys
t = open(sys.argv[1]).read()
acc = t[t.index("Accumulated forward statistics"):]
print(re.search(r"RX-packets: *(\d+)", acc)[1], re.search(r"TX-packets: *(\d+)", acc)[1])' "$OUT/dpdk-io-a.log")
  echo "dpdk-testpmd io, mlx5 PMD ($DEVARGS; rx ring 1024, tx ring 2048, burst 32, flow control on):"
  # rxcost.py: the rx burst's empty calls, exactly (as in the receive-only mode; per received packet)
  python3 "$OUT/rxcost.py" "$OUT/dpdk-io-a.parse" "$OUT/dpdk-io-z.parse" "$RX" "$OUT/dpdk-io.rxcost"
  python3 "$OUT/iocost.py" dpdk "$OUT/dpdk-io-a.parse" "$OUT/dpdk-io-z.parse" "$TX" "$OUT/dpdk-io.fig" \
    "$OUT/dpdk-io.rxcost"
  io_counts "$OUT/dpdk-io-a.emu" "$RX" "$TX"
  echo "  testpmd's drops: $(grep -h -o 'TX-dropped: *[0-9]*' "$OUT/dpdk-io-a.log" | tail -1)"
  echo "  the PMD's choice: $(grep -h -A1 'selected Tx function' "$OUT/dpdk-io-a.log" | tr -s '\t\n' '  ')$(grep -h 'selected.*Rx function' "$OUT/dpdk-io-a.log" | sort -u | tr -s '\t\n' '  ')"
  echo "  testpmd's own burst statistics: $(grep -h 'RX-bursts' "$OUT/dpdk-io-a.log" "$OUT/dpdk-io-z.log" | tr -s ' \n' '  ')"
  python3 "$OUT/rawmiss.py" "$OUT/dpdk-io-a.parse" "$TX" "$OUT/dpdk-io.misses"
  fi
  if [[ -f $OUT/rawq-io.misses && -f $OUT/dpdk-io.misses ]]; then
    python3 "$OUT/misses.py" "$OUT/rawq-io.misses" "$OUT/dpdk-io.misses" \
      "every round's misses over the forwarded packets, nothing subtracted, for both"
  fi
fi
