"""``dse measure``: run the micro-benchmarks and timed training steps, write the JSONL ``dse calibrate`` reads.

Output: one ``kind: micro`` row (the GPU's rates) and one ``kind: base`` row per training
configuration (model x attention x recomputation x micro-batch), in the format of
``data/h100_hf_training.jsonl`` (see data/README.md); each base row also carries its model's
``config`` so that a model outside the catalog reads back exactly. ``--device cpu --smoke`` runs
tiny shapes on the CPU in a few seconds (the tests use it; CPU times calibrate nothing).
"""

from __future__ import annotations

import json
import sys

from dse.errors import InputError

GEMM_SHAPES = ((8192, 8192, 8192), (4096, 4096, 4096), (8192, 1024, 1024), (16384, 4800, 1600), (8192, 4096, 1024),
               (8192, 11008, 4096))
ADAMW_PARAMS = (3.55e8, 1.56e9)
# MoE expert shapes (hidden, expert FFN, local experts at the published expert parallelism, top-k, experts) and the
# rows per local expert an MoE layer gives them (T k / E x ep for T = 4096 tokens per rank; see docs/moe.md).
EXPERT_SHAPES = {"qwen3-30b-a3b": (2048, 768, 16, 8, 128), "gpt-oss-120b": (2880, 2880, 16, 4, 128),
                 "deepseek-v3": (7168, 2048, 8, 8, 256), "mixtral-8x7b": (4096, 14336, 1, 2, 8)}
EXPERT_TOKENS = (256, 1024, 4096)
SMOKE_CONFIG = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 512, "n_positions": 64}


def _ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated integers, e.g. 4,8") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{flag} {text!r}: expected integers >= 1")
    return vals


def _configs(models: str, smoke: bool, impl: str = "torch") -> dict:
    """name -> what builds it: a GPT-2-style catalog model's dimensions, or (``--impl hf``) a config.json path."""
    if smoke:
        return {"smoke-gpt": SMOKE_CONFIG}
    from dse.catalog import load_model

    out: dict = {}
    for name in (x.strip() for x in models.split(",") if x.strip()):
        if name.endswith(".json"):
            if impl != "hf":
                raise InputError(f"--models {name}: a config.json is built by Transformers: add --impl hf")
            m = load_model(name)     # dse reads it (one-line error if it cannot), so the rows validate
            out[name] = {"hf_config": name, "n_positions": m.max_seq_len}
            continue
        m = load_model(name)
        if m.ffn_type != "gelu" or m.position != "learned" or not m.tied_embeddings or m.hidden % m.heads:
            raise InputError(f"--models {name}: dse measure builds GPT-2-style models (GeLU MLP, learned "
                             f"positions, tied head) or, with --impl hf, a config.json; {name} is neither")
        out[name] = {"layers": m.layers, "hidden": m.hidden, "heads": m.heads, "vocab": m.vocab,
                     "n_positions": m.max_seq_len}
    return out


def _torch(device: str, smoke: bool):
    from dse._optional import require

    torch = require("torch", "measure", "dse measure")
    if device not in ("cuda", "cpu"):
        raise InputError(f"--device {device!r}; allowed: cuda, cpu")
    if device == "cpu" and not smoke:
        raise InputError("--device cpu: only with --smoke (CPU timings do not calibrate a GPU)")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("no CUDA GPU visible to PyTorch: dse measure times a GPU (--device cpu --smoke runs the "
                         "tiny CPU smoke mode)")
    if device == "cpu":
        torch.set_num_threads(1)   # tiny shapes: threads only add contention
    return torch


def micro_row(torch, device: str, smoke: bool, moe: bool = False) -> dict:
    from dse.measure import micro

    reps = 2 if smoke else 10
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    row: dict = {"kind": "micro", "torch": torch.__version__, "smoke": smoke}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        row.update(device=props.name, sms=props.multi_processor_count)
    else:
        row.update(device="cpu")
    shapes = ((128, 128, 128), (256, 128, 64)) if smoke else GEMM_SHAPES
    row["gemm_tflops"] = micro.gemm_tflops(shapes, device, dtype, reps)
    row["hbm_copy_GBps_rw"] = micro.copy_rate(2**20 if smoke else 2**30, device, reps)
    if device == "cuda":
        row.update(micro.pinned_rates(2**28, reps))
        ar = micro.allreduce_busbw(2**28, reps)
        if ar:
            row["allreduce"] = ar
    from dse.measure.host import host_block

    row["host"] = host_block(torch, device, smoke)   # the host's dispatch speed: dse calibrate's dispatch_scale
    sizes = (1e5,) if smoke else ADAMW_PARAMS
    row["adamw_fused_fp32_step_s"] = {f"{n:.3g}": micro.adamw_step(n, device, reps) for n in sizes}
    if moe:
        shapes = {"smoke-moe": (64, 32, 4, 2, 8)} if smoke else EXPERT_SHAPES
        row["expert_gemm_tflops"] = {name: {str(m): micro.expert_gemm_tflops(h, f, e, m, device, dtype, reps)
                                            for m in ((16,) if smoke else EXPERT_TOKENS)}
                                     for name, (h, f, e, _, _) in shapes.items()}
        row["moe_permute"] = {name: micro.permute_rates(64 if smoke else 4096, h, k, n, device, dtype, reps)
                              for name, (h, _, _, k, n) in shapes.items()}
    return row


def base_rows(torch, device: str, smoke: bool, configs: dict, batches: list[int], seq_len: int, impl: str = "torch",
              profile: bool = False):
    from dse.measure.gpt import train_steps

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    warmup, repeats = (1, 2) if smoke else (3, 5)
    s = min(seq_len, 32) if smoke else seq_len
    for name, cfg in configs.items():
        if s > cfg["n_positions"]:
            raise InputError(f"--seq-len {s}: longer than {name}'s position table ({cfg['n_positions']})")
        for attn in ("sdpa", "eager"):
            for recompute in ("none", "full"):
                for b in batches:
                    head = {"kind": "base", "model": name, "attn": attn, "b": b, "s": s, "recompute": recompute,
                            "offload_host": False, "use_cache": False, "impl": impl}
                    try:
                        row = train_steps(cfg, attn, recompute, b, s, device, dtype, warmup, repeats, impl,
                                          profile)
                    except torch.cuda.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        sys.stderr.write(f"dse measure: {name} {attn} b{b} {recompute}: out of memory, skipped\n")
                        continue
                    except InputError:
                        raise
                    except Exception as exc:   # a configuration the library refuses (Gemma 2 and sdpa): go on
                        if device == "cuda":
                            torch.cuda.empty_cache()
                        sys.stderr.write(f"dse measure: {name} {attn} b{b} {recompute}: skipped "
                                         f"({skip_reason(exc)})\n")
                        continue
                    prof = row.pop("profile", None)
                    own = {} if "hf_config" in cfg else {"config": cfg}
                    yield {**head, **row, **own, "dtype": str(dtype).replace("torch.", ""), "smoke": smoke}
                    if prof is not None:
                        yield {"kind": "profile", **{k: head[k] for k in ("model", "attn", "b", "s", "recompute",
                                                                           "impl")}, **prof}


def skip_reason(exc: BaseException) -> str:
    """One line for a configuration that raised: the exception's type and its message's first line.

    >>> skip_reason(ValueError("Gemma2ForCausalLM does not support sdpa\\nmore"))
    'ValueError: Gemma2ForCausalLM does not support sdpa'
    """
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def run(out: str, device: str, smoke: bool, models: str, batches: str, seq_len: int, impl: str = "torch",
        profile: bool = False, moe: bool = False, micro: bool = True) -> int:
    if impl not in ("torch", "hf"):
        raise InputError(f"--impl {impl!r}; allowed: torch, hf")
    torch = _torch(device, smoke)
    bs = [1, 2] if smoke else _ints(batches, "--batches")
    configs = _configs(models, smoke, impl)     # bad --models fail before any measurement
    n = 0
    try:
        with open(out, "w") as f:
            if micro:
                f.write(json.dumps(micro_row(torch, device, smoke, moe)) + "\n")
                f.flush()
            for row in base_rows(torch, device, smoke, configs, bs, seq_len, impl, profile):
                f.write(json.dumps(row) + "\n")
                f.flush()
                n += row["kind"] == "base"
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write ({exc.strerror})") from None
    what = " and the micro-benchmarks" if micro else ""
    print(f"{n} training configurations{what} written to {out} "
          f"(dse calibrate --data {out} --hw HW)")
    return 0
