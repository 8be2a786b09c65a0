#!/usr/bin/env bash
# The all-reduce bench of this checkout against another commit, interleaved in one run: per algorithm
# and size, the median over repetitions of (time here / time at REF), so drift on a shared machine
# moves both sides alike.
#
#   scripts/bench-vs-ref.sh REF RANKS REPS [extra `scalerepro bench` arguments...]
#   e.g. scripts/bench-vs-ref.sh b5e6cd4 4 5 --algos ring,multicolor --set bench.min_bytes=16777216
#
# REF is checked out once into a temporary worktree and run from this checkout's .venv with
# PYTHONPATH pointing at its sources. Ratios below 1 mean this checkout is faster.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
ref=$1 ranks=$2 reps=$3
shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
[ -x "$py" ] || { echo "bench-vs-ref: no $py; run make venv first" >&2; exit 2; }
work=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$work/ref" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$here" worktree add --detach "$work/ref" "$ref" >/dev/null
for i in $(seq 1 "$reps"); do
  for side in here ref; do
    src=$here/src
    [ "$side" = ref ] && src=$work/ref/src
    echo "bench-vs-ref: repetition $i/$reps, $side" >&2
    PYTHONPATH=$src "$here/.venv/bin/mpiexec" -n "$ranks" "$py" -m scalerepro.cli bench "$@" \
      --out "$work/$side-$i.json" 2>/dev/null
  done
done
"$py" - "$work" "$reps" <<'PY'
import json, statistics, sys
from pathlib import Path
work, reps = Path(sys.argv[1]), int(sys.argv[2])
def times(side, i):
    return {(r["algorithm"], r["bytes"]): r["time_us"] for r in json.loads((work / f"{side}-{i}.json").read_text())["rows"]}
pairs = [(times("here", i), times("ref", i)) for i in range(1, reps + 1)]
print(f"{'algorithm':>15} {'size(B)':>11} {'here/ref time':>14} {'min':>6} {'max':>6}")
for key in pairs[0][0]:
    ratios = [h[key] / r[key] for h, r in pairs if key in r]
    if ratios:
        print(f"{key[0]:>15} {key[1]:>11} {statistics.median(ratios):>14.3f} {min(ratios):>6.2f} {max(ratios):>6.2f}")
PY
