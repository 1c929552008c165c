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
#   io: `fwd -b dv --mode io --tx-first N` beside `testpmd --forward-mode=io` + `start tx_first`
#       (one looped-back port: every frame sent comes back and is forwarded again).
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
#   inclusive cost with exact call counts (--dump-instr=yes; README "How DPDK's receive figure
#   was found").
# * each tool's packet counts are checked against the emulated device's (RAWQ_EMU_STATS).
# DPDK's settings are pinned and printed: txq_mpw_en=1 (eMPW, as rawq on this part),
# txq_inline_min=0, txq_inline_max=0, txq_inline_mpw=0 (no inline data: the emulated part
# needs none, rawq inlines none), rxq_cqe_comp_en=1 (CQE compression, as rawq by default).
#
# Usage (as root): bash scripts/bench-vs-dpdk.sh [--modes tx,rx,io] [--sides rawq,dpdk]
#                  [--seconds S] [--keep]
#   --sides       which tools run (default both; `--modes rx --sides dpdk`: testpmd's rx runs only)
#   --seconds S   testpmd's forwarding window under valgrind (default 20)
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
[[ ,$SIDES, != *,rawq,* ]] || cargo build --release --quiet --all-features --example pktgen --example fwd
cargo build --release --quiet -p rawq-emu
export RAWQ_EMU_LIB=$ROOT/target/release/librawq_emu.so
export RAWQ_EMU_SYSFS=$ROOT/target/release/rawq-emu-sysfs
PKTGEN=$ROOT/target/release/examples/pktgen FWD=$ROOT/target/release/examples/fwd

OUT=$(mktemp -d "${TMPDIR:-/tmp}/rawq-vs-dpdk.XXXXXX")
[[ $KEEP == 1 ]] && echo "bench: files in $OUT" >&2
trap '[[ $KEEP == 1 ]] || rm -rf "$OUT"' EXIT
VG=(valgrind --tool=callgrind --separate-threads=yes --fair-sched=yes)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPU(s), $(uname -r);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); DPDK $(dpkg-query -W -f '${Version}' librte-net-mlx5-23 2>/dev/null || echo '?')"

# The Python half: reads one run's callgrind files (one per thread), finds the worker thread
# and the driver's functions, prints one JSON object.
cat >"$OUT/parse.py" <<'EOF'
import glob, json, re, subprocess, sys
tool, prefix = sys.argv[1], sys.argv[2]
LINE = re.compile(r'^\s*([\d,]+) \([^)]*\)\s+([*>])\s+(.*?)(?: \(([\d,]+)x\))?(?: \[(.*)\])?$')
def tree(path):
    out = subprocess.run(['callgrind_annotate', '--tree=calling', '--inclusive=yes',
                          '--threshold=100', path], capture_output=True, text=True).stdout
    incl, calls, cur = {}, {}, None
    for l in out.splitlines():
        m = LINE.match(l)
        if not m:
            continue
        ir, kind, name, n, obj = int(m[1].replace(',', '')), m[2], m[3], m[4], m[5] or ''
        name = name.split(':', 1)[-1] if not name.startswith('???') else name[4:] + '@' + obj.rsplit('/', 1)[-1]
        if kind == '*':
            cur = name
            incl[name] = max(incl.get(name, 0), ir)
        elif cur is not None:
            calls.setdefault(cur, []).append((name, ir, int(n.replace(',', '')) if n else 0))
    return incl, calls
def total(path):
    for l in open(path):
        if l.startswith('summary:') or l.startswith('totals:'):
            return int(l.split()[1])
best = None
for f in sorted(glob.glob(prefix + '-*')):
    incl, calls = tree(f)
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
        best = (f, incl[loop], incl, calls, loop)
if best is None:
    sys.exit('no worker thread found in ' + prefix)
f, whole, incl, calls, loop = best
r = {'thread_file': f, 'loop': loop, 'whole': whole, 'driver': {}, 'app': {}}
if tool == 'rawq':
    for k, v in incl.items():
        m = re.search(r'DvQueue as rawq::queue::QueueOps>::(tx_burst|rx_burst|alloc_burst|reclaim)$', k)
        if m:
            r['driver'][m[1]] = {'ir': v, 'calls': 0}
    for (name, ir, n) in calls.get(loop, []):
        # pktgen's settle (after the loop: waiting for the last completions) is left out.
        if name.endswith('pktgen::loops::settle'):
            r['whole'] -= ir
        # pktgen --rx naps after 10000 empty polls (before the first frame, after the last):
        # time off the data path, not its instructions.
        if name.endswith('std::thread::functions::sleep'):
            r['whole'] -= ir
    for (name, ir, n) in sum(calls.values(), []):
        m = re.search(r'DvQueue as rawq::queue::QueueOps>::(tx_burst|rx_burst|alloc_burst|reclaim)$', name)
        if m:
            r['driver'][m[1]]['calls'] += n
        if re.search(r'write_udp$|measure::fill$', name):
            r['app']['frame writing (' + name.rsplit('::', 1)[-1] + ')'] = ir
else:
    for (name, ir, n) in calls[loop]:
        if name.endswith('librte_net_mlx5.so.23.0'):
            r['driver'][name] = {'ir': ir, 'calls': n, 'callees': calls.get(name, [])}
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
print(label)
for key in runs[0]['series']:
    show(key, [tuple(r['series'][key]) for r in runs])
EOF

# DPDK's receive figure from per-instruction counts (README: "How DPDK's receive figure was
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
    'application (whole - driver)': [p['whole'] - drv, pk, calls]},
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
  DPDK_TESTPMD=$OUT/$tag.vg RAWQ_EMU_STATS=$OUT/$tag.emu RAWQ_EMU_RXGEN_START=$OUT/$tag.go bash scripts/testpmd-emu.sh --mem 512 \
    --devargs "$DEVARGS" --eal --log-level=pmd.net.mlx5:debug -- -i --forward-mode="$mode" \
    --total-num-mbufs=32768 --txd="$desc" --rxd="$desc" --burst=32 --txpkts=64 \
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
    'application (whole - driver)': [p['whole'] - dsum, pk, burst]},
    'notes': {'thread': p['thread_file'].rsplit('-', 1)[-1], 'forwarding function': p['loop'],
              'PMD functions': {k: v for k, v in drv},
              'app callees': p['app']}}))
EOF
}

# Waits (bounded: 20 min) until the stats file $1 says the frame source made its $2 frames and
# the device took them all (received into an RQ or dropped, counted), beside what the port's
# kernel netdev sent (testpmd's TAP: looped back, it arrives too, or the full wire drops it).
wait_generated() {
  local i
  for i in $(seq 2400); do
    python3 - "$1" "$2" <<'EOF' && return 0
import re, sys
try:
    t = open(sys.argv[1]).read()
except OSError:
    sys.exit(1)
def c(k):
    m = re.search(r' %s: (\d+)' % k, t)
    return int(m[1]) if m else -1
done = re.search(r'rawq-emu rxgen: .*done: true', t) is not None
took = c('rx_frames') + c('rx_no_buffer') + c('rx_to_kernel') + c('rx_rule_drop') + c('wire_drops')
sys.exit(0 if done and took == int(sys.argv[2]) + c('netdev_tx') else 1)
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
  python3 "$OUT/fit.py" "rawq pktgen -b dv (eMPW; rings of 8192 and 256):" "$A" "$B"
  report_notes "$A"; report_notes "$B"
  dpdk_run dpdk-tx-a txonly 4096 start
  dpdk_run dpdk-tx-b txonly 512 start
  A=$(dpdk_series dpdk-tx-a TX) B=$(dpdk_series dpdk-tx-b TX)
  python3 "$OUT/fit.py" "dpdk-testpmd txonly, mlx5 PMD ($DEVARGS; rings of 4096 and 512):" "$A" "$B"
  report_notes "$A"; report_notes "$B"
  echo "  the PMD's choice: $(grep -h -A1 'selected Tx function' "$OUT/dpdk-tx-a.log" | tr -s '\t\n' '  ')"
  echo "  its settings: $(grep -h -o '"txq_[a-z_]*" is [-0-9]*\|"rxq_cqe_comp_en" is [0-9]*' "$OUT/dpdk-tx-a.log" | tr '\n' ' ')"
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
  fi
  if [[ ,$SIDES, == *,dpdk,* ]]; then
  # --no-flush-rx: testpmd's start otherwise drains and discards what its RQs hold (frames
  # the source put there while testpmd read its start command).
  # --dump-instr=yes: per-instruction counts, from which README's DPDK receive figure is
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
  fi
  unset RXGEN_COUNT
fi

# rawq fwd io run $1 (tag) with $2 frames sent first; prints the run's JSON.
rawq_io() {
  local tag=$1 first=$2
  RAWQ_EMU_STATS=$OUT/$tag.emu bash scripts/emu.sh -- "${VG[@]}" --callgrind-out-file="$OUT/$tag.out" \
    "$FWD" -b dv -d mlx5_0 --mode io --tx-first "$first" --burst 32 --ring 1024 -t "$SECS" --rule 'udp dst-port 9000 -> queue 0' \
    --quiet --json >"$OUT/$tag.json" 2>"$OUT/$tag.log" || { tail "$OUT/$tag.log" >&2; return 1; }
  python3 "$OUT/parse.py" rawq "$OUT/$tag.out" >"$OUT/$tag.parse"
  python3 - "$OUT/$tag.json" "$OUT/$tag.parse" "$OUT/$tag.emu" <<'EOF'
import json, re, sys
j, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
emu = open(sys.argv[3]).read()
frames = int(re.search(r'tx_frames: (\d+)', emu)[1])
pk = j['forwarded']
d = p['driver']
ir = lambda k: d.get(k, {'ir': 0})['ir']
calls = d['rx_burst']['calls']
drv = ir('rx_burst') + ir('tx_burst') + ir('reclaim')
print(json.dumps({'pkts': pk, 'device_frames': frames, 'calls': calls, 'series': {
    'driver: rx_burst + tx_burst + reclaim': [drv, pk, calls],
    'whole forwarding thread (fwd::forward)': [p['whole'], pk, calls],
    'application (whole - driver)': [p['whole'] - drv, pk, calls]},
    'notes': {'thread': p['thread_file'].rsplit('-', 1)[-1], 'driver': d}}))
EOF
}

if [[ ,$MODES, == *,io,* ]]; then
  echo
  echo "== io forwarding on one looped-back port: the frames sent first go round (rx -> tx) =="
  A=$(rawq_io rawq-io-a 512) B=$(rawq_io rawq-io-b 64)
  python3 "$OUT/fit.py" "rawq fwd -b dv --mode io (--tx-first 512 and 64, ring 1024):" "$A" "$B"
  report_notes "$A"; report_notes "$B"
  dpdk_run dpdk-io-a io 1024 "start tx_first 16"
  dpdk_run dpdk-io-b io 1024 "start tx_first 2"
  A=$(dpdk_series dpdk-io-a TX) B=$(dpdk_series dpdk-io-b TX)
  python3 "$OUT/fit.py" "dpdk-testpmd io, mlx5 PMD ($DEVARGS; start tx_first 16 and 2, rings of 1024):" "$A" "$B"
  report_notes "$A"; report_notes "$B"
  echo "  the PMD's choice: $(grep -h 'selected.*Rx function\|selected Tx function' "$OUT/dpdk-io-a.log" | sort -u | tr -s '\t\n' '  ')"
fi
