# Sourced by the device-measurement scripts (scripts/device_measure*.sh), from the repository root: the output folder
# ($OUT, default `measured`), the environment `dse measure` runs in, and $OUT/env.txt recording the GPU, its
# software and the host CPU (printed too).
set -u
OUT=${OUT:-measured}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version --format=csv
  python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
  lscpu | grep -m1 'Model name'; nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
