#!/usr/bin/env bash
# The GPU session behind data/h200_*.jsonl (see data/README.md): `dse measure` on one lent GPU, run from the
# repository root as `OUT=dir bash scripts/device_measure.sh`. Sections run in order of importance, each under
# its own time limit, each writing its rows as they are measured (a section cut short keeps what it measured).
source scripts/device_env.sh   # $OUT, the environment, $OUT/env.txt (with the CPU count since 2026-11-27)
HF=tests/fixtures/hf
section() {   # name, seconds, dse measure arguments...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" python3 -m dse measure --out "$OUT/$name.jsonl" "$@" 2> "$OUT/$name.err"
  echo "== $name rc=$? $((SECONDS - t0)) s, $(grep -c '"kind": "base"' "$OUT/$name.jsonl" 2>/dev/null) configurations"
  grep -v -e USDT -e 'loss_type' "$OUT/$name.err" | tail -3
}
# 1. Transformers' GPT-2 as in the shared H100 file, every kernel profiled, plus the MoE expert GEMMs
section gpt2_hf 160 --impl hf --profile --moe --models gpt2-medium,gpt2-xl --batches 4,8,16
# 2. Other Hugging Face families from their config.json (no weights): Qwen2, GPT-NeoX (Pythia), Gemma 3
section hf_small 100 --no-micro --impl hf --profile --models $HF/Qwen2-0.5B/config.json,$HF/pythia-1.4b/config.json,$HF/gemma-3-1b-pt/config.json --batches 2,8
# 3. A Llama-3.1-8B (all 8 B parameters, bf16 weights and gradients)
section llama8b 70 --no-micro --impl hf --profile --models $HF/Llama-3.1-8B/config.json --batches 1,2
# 4. dse measure's own plain-torch GPT (the default --impl)
section gpt2_torch 45 --no-micro --models gpt2-medium,gpt2-xl --batches 8
ls -la "$OUT"
