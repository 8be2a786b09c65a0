#!/usr/bin/env bash
# The GPU paths, on whatever CUDA devices this machine has (CI has none; run it where a GPU is):
#   1 GPU : every algorithm on the torch executor at 1 rank (the identity path), ResNet-50 bf16 training
#           images/s beside the papers' per-accelerator rates (config/baselines.yaml), and the all-reduce
#           bench with nccl as the peer;
#   N GPUs: every algorithm against nccl, on CUDA buffers through the torch executor, at 2..N ranks.
#
#   scripts/gpu-check.sh [OUT_DIR]      (default results/gpu-check; needs `make venv` first)
#
# Each step's JSON lands in OUT_DIR; the tables go to stdout. A step that fails stops the script.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/results/gpu-check}
bin=$here/.venv/bin
[ -x "$bin/python" ] || { echo "gpu-check: no $bin/python; run make venv first" >&2; exit 2; }
export PATH=$bin:$PATH
gpus=$(python -c 'import torch; print(torch.cuda.device_count())')
[ "$gpus" -ge 1 ] || { echo "gpu-check: torch sees no CUDA device here" >&2; exit 2; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/# GPU: /' || true
echo "# $gpus CUDA device(s), torch $(python -c 'import torch; print(torch.__version__, torch.version.cuda)')"

algos=auto,hierarchical,multicolor,multiring,rabenseifner,ring,torus2d,torus2d-3phase
echo "## 1 rank: torch executor on a CUDA buffer (identity), nccl peer"
mpiexec -n 1 python -m scalerepro.cli bench --device cuda --algos "$algos" --compare nccl \
  --set comm.executor=torch --set bench.max_bytes=67108864 --out "$out/bench-n1.json"

echo "## ResNet-50, bf16, 1 GPU: ours (nccl) vs DDP; published images/s per accelerator beside it"
mpiexec -n 1 python -m scalerepro.cli bench-train --algo nccl --set train.model=resnet50 --set train.device=cuda \
  --set train.bf16=true --set train.image_size=224 --set train.batch_per_rank=128 --steps 20 --reps 3 \
  --baselines "$here/config/baselines.yaml" --out "$out/train-resnet50-n1.json"

for n in $(seq 2 "$gpus"); do
  echo "## $n ranks, one GPU each: every algorithm on the torch executor against nccl"
  mpiexec -n "$n" python -m scalerepro.cli bench --device cuda --algos "$algos" --compare nccl \
    --set bench.min_bytes=1024 --set bench.max_bytes=268435456 --out "$out/bench-n$n.json"
  echo "## $n ranks: training, multicolor on the GPUs vs DDP (nccl)"
  mpiexec -n "$n" python -m scalerepro.cli bench-train --algo multicolor --set train.model=resnet50 \
    --set train.device=cuda --set train.bf16=true --set train.image_size=224 --set train.batch_per_rank=128 \
    --steps 20 --reps 3 --out "$out/train-resnet50-multicolor-n$n.json"
done
echo "gpu-check: results in $out"
