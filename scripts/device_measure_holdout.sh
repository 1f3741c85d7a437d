#!/usr/bin/env bash
# The GPU session behind data/h200/vm2/ (data/README.md): `dse measure` on one lent GPU, from the repository root as
# `OUT=dir bash scripts/device_measure_holdout.sh`. Written for an H100; on 2026-11-27 the device tool lent an H200
# (the kind its first call gets when no H100 opens), so the files sit under data/h200/vm2/. Section 4's output files
# (h200_families.jsonl, llama8b.jsonl) were joined into vm2/repeat_families.jsonl, section 2's with a second run's
# (data/README.md) into vm2/dense_families.jsonl.
# Sections run in order of importance, each under its own time limit, each writing its rows as they are measured
# (a section cut short keeps what it measured). Models are built from config.json with random weights (no download).
source scripts/device_env.sh   # $OUT, the environment, $OUT/env.txt (with the CPU count since 2026-11-27)
M=models/hf F=tests/fixtures/hf
section() {   # name, seconds, dse measure arguments...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" python3 -m dse measure --out "$OUT/$name.jsonl" "$@" 2> "$OUT/$name.err"
  echo "== $name rc=$? $((SECONDS - t0)) s, $(grep -c '"kind": "base"' "$OUT/$name.jsonl" 2>/dev/null) configurations"
  grep -v -e USDT -e 'loss_type' -e 'token_id must be' "$OUT/$name.err" | tail -4
  { echo "== $name"; cat "$OUT/$name.err"; } >> "$OUT/log.txt"; rm -f "$OUT/$name.err"
}
# 1. The micro-benchmarks with CUDA-event timing, and the MoE expert GEMMs at four published shapes
section micro 75 --models "" --moe
# 2. Seven dense families no GPU of this project has run: Llama 3.2, Qwen3, Phi-2, StarCoder2, SmolLM2, OLMo, StableLM 2
section dense_families 185 --no-micro --impl hf --profile --batches 4 --models \
$M/meta-llama/Llama-3.2-1B/config.json,$M/Qwen/Qwen3-0.6B/config.json,$M/microsoft/phi-2/config.json,\
$M/HuggingFaceTB/SmolLM2-360M/config.json,$M/allenai/OLMo-1B-hf/config.json,$M/stabilityai/stablelm-2-1_6b/config.json,\
$M/bigcode/starcoder2-3b/config.json
# 3. Two small-expert MoE families in Transformers' eager code: OLMoE (64 experts, top 8), Granite MoE (32, top 8)
section moe_families 105 --no-micro --impl hf --profile --batches 2 --models \
$F/OLMoE-1B-7B-0924/config.json,$F/granite-3.0-1b-a400m-base/config.json
# 4. The four families of data/h200/hf_families.jsonl, on this H100 (Llama-3.1-8B last: the largest)
section h200_families 150 --no-micro --impl hf --profile --batches 2,8 --models \
$F/Qwen2-0.5B/config.json,$F/pythia-1.4b/config.json,$F/gemma-3-1b-pt/config.json
section llama8b 45 --no-micro --impl hf --profile --batches 1 --models $F/Llama-3.1-8B/config.json
ls -la "$OUT"
