#!/usr/bin/env bash
# Repeated `scalerepro bench` runs in one session; per algorithm and size, the median over repetitions of
#   vs PEER    : time / PEER's time in the same run (busbw ratio = its inverse)
#   vs fastest : time / the fastest other algorithm's time at that size in the same run (how `auto` is judged)
#   vs chosen  : for `auto`, time / the time of the algorithm it chose, run by name in the same run (the
#                noise floor: the same schedule twice)
#
#   scripts/bench-ratios.sh RANKS REPS PEER [extra `scalerepro bench` arguments...]
#   e.g. scripts/bench-ratios.sh 2 5 native --algos native,ring,multicolor --set bench.min_bytes=33554432
#
# PEER must be among --algos. Each repetition's JSON is kept in $BENCH_RATIOS_DIR (default a temporary
# folder that is removed). Ratios below 1 mean faster than the peer.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
ranks=$1 reps=$2 peer=$3
shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
[ -x "$py" ] || { echo "bench-ratios: no $py; run make venv first" >&2; exit 2; }
work=${BENCH_RATIOS_DIR:-}
if [ -z "$work" ]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$work"
for i in $(seq 1 "$reps"); do
  echo "bench-ratios: repetition $i/$reps" >&2
  "$here/.venv/bin/mpiexec" -n "$ranks" "$py" -m scalerepro.cli bench "$@" --out "$work/rep-$i.json" \
    2>"$work/rep-$i.log" || { tail -5 "$work/rep-$i.log" >&2; exit 1; }
done
"$py" - "$work" "$reps" "$peer" <<'PY'
import json, statistics, sys
from pathlib import Path
work, reps, peer = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
runs = []
for i in range(1, reps + 1):
    rows = json.loads((work / f"rep-{i}.json").read_text())["rows"]
    runs.append({(r["algorithm"], r["bytes"]): r for r in rows})
keys = list(runs[0])
print(f"{'algorithm':>15} {'size(B)':>11} {'vs ' + peer:>12} {'vs fastest':>11} {'vs chosen':>10} {'busbw GB/s':>11}"
      "  chosen/as")
for algo, size in keys:
    vs_peer, vs_best, vs_chosen, bw = [], [], [], []
    for run in runs:
        t = run[(algo, size)]["time_us"]
        others = [r["time_us"] for (a, b), r in run.items() if b == size and a not in (algo, "auto")]
        vs_peer.append(t / run[(peer, size)]["time_us"])
        vs_best.append(t / min(others) if others else 1.0)
        bw.append(run[(algo, size)]["busbw_GBps"])
        chosen = run[(algo, size)].get("schedule", {}).get("algorithm", algo)
        if chosen != algo and (chosen, size) in run:
            vs_chosen.append(t / run[(chosen, size)]["time_us"])
    sched = runs[0][(algo, size)].get("schedule", {})
    label = sched.get("algorithm", algo) + (f" as {sched['as']}" if "as" in sched else "")
    chosen = f"{statistics.median(vs_chosen):.3f}" if vs_chosen else "-"
    print(f"{algo:>15} {size:>11} {statistics.median(vs_peer):>12.3f} {statistics.median(vs_best):>11.3f} "
          f"{chosen:>10} {statistics.median(bw):>11.3f}  {label}")
PY
