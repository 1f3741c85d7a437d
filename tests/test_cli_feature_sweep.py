"""A sweep of ``dse estimate`` and ``dse search`` over the flags of issues 14-16 (MoE --ep, --cp, fp8, LoRA/QLoRA,
--stack, --from/--emit, --html, the 2025-26 GPUs), good and bad combinations alike.

Every invocation either succeeds with strict JSON whose verdict matches its numbers (a tier over its capacity is
never reported feasible, a feasible estimate names no violation), or fails with exit status 2, nothing on stdout
and exactly one line on stderr naming one of the flags (or the file, or the field) it was given: never a Python
traceback, never exit 0 with a silently wrong number.
"""

from __future__ import annotations

import json
import math
import random

import pytest

MODELS = ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "llama3-8b", "gemma3-27b", "gpt2-medium")
SYSTEMS = ("dgx-h100", "h100-cluster", "dgx-a100-80gb", "workstation-rtx4090-x2", "workstation-rtx5090",
           "mi300x-platform", "dgx-b200", "gb200-nvl72", "hgx-h20", "server-l40s-x8", "hgx-h100-cxl")
CHOICES = {   # flag -> values (None: the flag is not given)
    "--tp": (None, None, 2, 4),
    "--dp": (None, None, 2, 8),
    "--ep": (None, None, 1, 2, 3, 8, 16),
    "--cp": (None, None, 2, 3, 4),
    "--seq-len": (None, None, 2048, 4097, 8192),
    "--precision": (None, None, "fp8", "fp16"),
    "--fp8-scaling": (None, None, None, "current"),
    "--finetune": (None, None, "lora", "qlora"),
    "--lora-rank": (None, None, 8, 100000),
    "--lora-targets": (None, None, "mlp", "qv"),
    "--quantization": (None, None, None, "int8"),
    "--stack": (None, None, "pytorch", "compiled"),
    "--zero": (None, None, 1, 3),
    "--recompute": (None, "full"),
    "--offload-optimizer": (None, None, "cpu", "cxl"),   # cxl on a system without CXL memory: one line, exit 2
    "--offload-params": (None, None, "cpu", "cxl"),
    "--offload-activations": (None, None, "host", "ssd"),
    "--activation-offload-mechanism": (None, None, "hooks"),
}
FIELDS = {flag: flag[2:].replace("-", "_") for flag in CHOICES}


FP8_SYSTEMS = ("dgx-h100", "h100-cluster", "workstation-rtx4090-x2", "workstation-rtx5090", "mi300x-platform",
               "dgx-b200", "gb200-nvl72", "hgx-h20", "server-l40s-x8", "hgx-h100-cxl")


def _coherent(rnd: random.Random) -> dict[str, object]:
    """Flags that go together (most of them run): MoE with ep dividing the experts and dp, adapters on MoE models,
    cp whose 2 cp chunks divide the sequence, fp8 on FP8 GPUs with Megatron's kernels, LoRA flags with LoRA,
    activation offload to host memory (forwarding or saved-tensor hooks) on any model."""
    model, hw = rnd.choice(MODELS), rnd.choice(SYSTEMS)
    f: dict[str, object] = {"--model": model, "--hw": hw}
    if model.startswith("gpt2"):
        f["--seq-len"] = 1024
    else:
        f["--seq-len"] = rnd.choice((2048, 4096, 8192))
        f["--cp"] = rnd.choice((1, 2, 4))
    moe = model in ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b")
    if moe:
        f["--ep"] = rnd.choice((1, 2, 4, 8))
        f["--dp"] = f["--ep"] * rnd.choice((1, 2))
        if hw in FP8_SYSTEMS and rnd.random() < 0.5:     # FP8 expert GEMMs (Transformer Engine's GroupedLinear)
            f["--precision"] = "fp8"
            f["--fp8-scaling"] = rnd.choice(("delayed", "current"))
            f["--zero"] = rnd.choice((0, 1, 2))
        elif rnd.random() < 0.3 and f.get("--cp", 1) == 1:     # adapters on the experts (ZeRO-1)
            f["--finetune"] = rnd.choice(("lora", "qlora"))
            f["--lora-rank"] = rnd.choice((4, 16, 64))
            f["--lora-targets"] = rnd.choice(("all", "attention", "qv", "mlp"))
    elif rnd.random() < 0.5 and f.get("--cp", 1) == 1:
        f["--finetune"] = rnd.choice(("lora", "qlora"))
        f["--lora-rank"] = rnd.choice((4, 16, 64))
        f["--lora-targets"] = rnd.choice(("all", "attention", "qv", "mlp"))
        if f["--finetune"] == "qlora":
            f["--quantization"] = rnd.choice(("nf4", "int8"))
    elif hw in FP8_SYSTEMS and rnd.random() < 0.5:
        f["--precision"] = "fp8"
        f["--fp8-scaling"] = rnd.choice(("delayed", "current"))
        f["--zero"] = rnd.choice((0, 1, 2))
    if "--precision" not in f:
        f["--stack"] = rnd.choice(("megatron", "pytorch", "compiled"))
    f["--recompute"] = rnd.choice(("none", "selective", "full"))
    if rnd.random() < 0.3 and f.get("--zero", 1) != 0:   # offload: CXL memory where the hardware has it
        f["--offload-optimizer"] = rnd.choice(("cpu", "cxl") if hw == "hgx-h100-cxl" else ("cpu",))
    if rnd.random() < 0.3:        # activation offload (MoE layers too), to host memory by either mechanism
        f["--offload-activations"] = "host"
        f["--activation-offload-mechanism"] = rnd.choice(("forwarding", "hooks"))
    return f


def _sweep(n: int = 80, seed: int = 0) -> list[list[str]]:
    """n coherent flag sets, each also with one flag replaced by any of its values (good or bad)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        f = _coherent(rnd)
        g = dict(f)
        flag = rnd.choice(list(CHOICES))
        g[flag] = rnd.choice([v for v in CHOICES[flag] if v is not None])
        for flags in (f, g):
            out.append(["estimate", *(str(x) for kv in flags.items() for x in kv)])
    return out


def _leaves(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, obj


def check_estimate_json(text: str) -> dict:
    """Strict JSON, no NaN/inf/negative number, and a verdict that matches the numbers."""
    r = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    bad = [(p, v) for p, v in _leaves(r) if isinstance(v, (int, float)) and not isinstance(v, bool)
           and (not math.isfinite(v) or v < 0)]
    assert bad == []
    assert r["feasible"] == (r["violations"] == []), (r["feasible"], r["violations"])
    for tier, mem in r["memory"].items():
        if mem["total"] > mem["capacity"] * (1 + 1e-9):
            assert not r["feasible"] and any(tier in v for v in r["violations"]), (tier, r["violations"])
    assert r["time"]["iteration"] > 0 and r["throughput"]["tokens_per_s"] > 0
    return r


def check_one_line_error(res, argv) -> str:
    assert res.code == 2, (argv, res.code, res.err[-2000:])
    assert res.out == "", argv
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: error"), (argv, res.err)
    assert "Traceback" not in res.err
    return lines[0]


def names_a_given_flag(line: str, argv: list[str]) -> bool:
    given = [a for a in argv if a.startswith("--")]
    words = given + [FIELDS.get(a, a[2:].replace("-", "_")) for a in given] + [a for a in argv if "/" in a or
                                                                               a.endswith((".json", ".toml"))]
    return any(w in line for w in words)


@pytest.mark.parametrize("argv", _sweep(), ids=lambda a: " ".join(a[1:]).replace("--", "")[:90])
def test_every_flag_combination_is_json_or_one_line_error(dse, argv):
    res = dse(*argv, "--json")
    if res.code == 0:
        r = check_estimate_json(res.out)
        given = dict(zip(argv[::2], argv[1::2])) | dict(zip(argv[1::2], argv[2::2]))
        for flag in ("--ep", "--cp", "--tp", "--precision", "--finetune", "--stack"):   # the flags are what ran
            if flag in given:
                assert str(r["plan"][FIELDS.get(flag, flag[2:])]) == given[flag], (flag, r["plan"])
        if "--lora-rank" in given:
            assert r["plan"]["lora_rank"] == int(given["--lora-rank"])
    else:
        line = check_one_line_error(res, argv)
        assert names_a_given_flag(line, argv), (line, argv)


def test_the_sweep_has_both_outcomes(dse):
    codes = [dse(*argv, "--json").code for argv in _sweep(40, seed=1)]
    assert codes.count(0) >= 3 and codes.count(2) >= 3, codes


# bad input: (argv, a needle the line must hold)
BAD = [
    (["--model", "mixtral-8x7b", "--ep", "3", "--dp", "3"], "--ep 3"),
    (["--model", "mixtral-8x7b", "--ep", "16", "--dp", "16"], "--ep 16"),
    (["--model", "mixtral-8x7b", "--ep", "4", "--dp", "2"],
     "--ep 4 x --etp 1 = 4 does not divide --tp 1 x --cp 1 x --dp 2 = 2"),
    (["--model", "llama3-8b", "--ep", "2"], "--ep 2"),
    (["--model", "mixtral-8x7b", "--ep", "0"], "--ep"),
    (["--model", "llama3-8b", "--cp", "3", "--seq-len", "4096"], "--cp 3"),
    (["--model", "llama3-8b", "--cp", "2", "--seq-len", "4097"], "--cp 2"),
    (["--model", "llama3-8b", "--cp", "0"], "--cp"),
    (["--model", "llama3-8b", "--cp", "2", "--attention", "math"], "--cp 2"),
    (["--model", "llama3-8b", "--hw", "dgx-a100-80gb", "--precision", "fp8"], "--precision fp8"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--precision", "fp4"], "--precision"),
    (["--model", "mixtral-8x7b", "--hw", "dgx-a100-80gb", "--precision", "fp8"], "--precision fp8"),
    (["--model", "mixtral-8x7b", "--hw", "dgx-h100", "--precision", "fp8", "--zero", "3"], "--zero 3"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--precision", "fp8", "--stack", "pytorch"], "--precision fp8"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--fp8-scaling", "current"], "--fp8-scaling current"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--fp8-scaling", "sometimes"], "--fp8-scaling"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--set", "plan.fp8_param_gather=true"], "fp8_param_gather"),
    (["--model", "llama3-8b", "--finetune", "lora", "--lora-rank", "0"], "--lora-rank"),
    (["--model", "llama3-8b", "--finetune", "lora", "--lora-rank", "-4"], "--lora-rank"),
    (["--model", "llama3-8b", "--finetune", "lora", "--lora-rank", "4097"], "--lora-rank 4097"),
    (["--model", "llama3-8b", "--finetune", "lora", "--lora-rank", "2048", "--lora-targets", "qv"],
     "--lora-rank 2048"),
    (["--model", "llama3-8b", "--finetune", "lora", "--lora-targets", "ffn"], "--lora-targets"),
    (["--model", "llama3-8b", "--finetune", "lora", "--set", "plan.lora_targets=ffn"], "lora_targets"),
    (["--model", "llama3-8b", "--lora-rank", "8"], "--lora-rank"),
    (["--model", "llama3-8b", "--finetune", "lora", "--quantization", "nf4"], "--quantization nf4"),
    (["--model", "llama3-8b", "--finetune", "qlora", "--quantization", "fp4"], "--quantization"),
    (["--model", "llama3-8b", "--finetune", "dora"], "--finetune"),
    (["--model", "mixtral-8x7b", "--finetune", "qlora", "--ep", "2", "--dp", "2", "--zero", "3"], "--ep 2"),
    (["--model", "mixtral-8x7b", "--finetune", "qlora", "--lora-dropout", "0.05"], "--lora-dropout 0.05"),
    (["--model", "llama3-8b", "--stack", "jax"], "--stack"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--offload-optimizer", "cxl"], "--offload-optimizer cxl"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--zero", "3", "--offload-params", "cxl"], "--offload-params cxl"),
    (["--model", "llama3-8b", "--hw", "hgx-h100-cxl", "--offload-optimizer", "ram"], "--offload-optimizer"),
    (["--model", "llama3-8b", "--emit", "nemo"], "--emit"),
    (["--model", "llama3-8b", "--hw", "b200"], "b200"),
    (["--model", "llama3-8b", "--set", "plan.expert_capacity=1.25"], "expert_capacity"),
    (["--model", "mixtral-8x7b", "--set", "plan.pad_to_capacity=true"], "pad_to_capacity"),
    (["--model", "mixtral-8x7b", "--set", "plan.expert_capacity=0"], "expert_capacity"),
    (["--model", "mixtral-8x7b", "--set", "plan.expert_capacity=abc"], "expert_capacity"),
]


@pytest.mark.parametrize("argv, needle", BAD, ids=[" ".join(a).replace("--", "")[:70] for a, _ in BAD])
def test_bad_input_is_one_line_naming_the_flag(dse, argv, needle):
    line = check_one_line_error(dse("estimate", *argv), argv)
    assert needle in line, (needle, line)


def test_html_into_a_missing_folder_is_one_line(dse, tmp_path):
    argv = ["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--ep", "8", "--html",
            str(tmp_path / "no" / "such" / "page.html")]
    assert "--html" in check_one_line_error(dse(*argv), argv)


@pytest.mark.parametrize("name, text, needle", [
    ("ds.json", '{"train_batch_size": ', "ds.json"),
    ("ds.json", "[1, 2]", "ds.json"),
    ("ds.json", '{"zero_optimization": {"stage": "three"}}', "zero_optimization.stage"),
    ("ds.json", '{"bf16": {"enabled": "yes"}}', "bf16.enabled"),
    ("ds.json", b"\x00\x01\xff", "ds.json"),
    ("ds.json", "", "ds.json"),
    ("job.toml", "[parallelism\nx=", "job.toml"),
    ("job.toml", '[parallelism]\ntensor_parallel_degree = "two"\n', "tensor_parallel_degree"),
    ("job.toml", "[parallelism]\ncontext_parallel_degree = 3\n", "--cp 3"),
    ("job.toml", "[parallelism]\nexpert_parallel_degree = 3\n", "--ep 3"),
    ("job.toml", "[training]\nseq_len = 0\n", "training.seq_len"),
])
def test_from_a_malformed_file_is_one_line(dse, tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    framework = "deepspeed" if name.endswith(".json") else "torchtitan"
    argv = ["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--from", framework, str(path)]
    line = check_one_line_error(dse(*argv), argv)
    assert needle in line and (name in line or needle.startswith("--")), line


@pytest.mark.parametrize("args, needle", [
    ("--tensor-model-parallel-size x", "--tensor-model-parallel-size"),
    ("--context-parallel-size 0", "--context-parallel-size"),
    ("--expert-model-parallel-size 3", "--ep 3"),
    ("--fp8-format bogus", "--fp8-format"),
    ("--bf16 --fp8-format hybrid --fp8-recipe bogus", "--fp8-recipe"),
    ('--seq-length 10 "', "cannot split"),
])
def test_from_malformed_megatron_arguments_is_one_line(dse, args, needle):
    argv = ["estimate", "--model", "mixtral-8x7b", "--hw", "dgx-h100", "--from", "megatron", args]
    assert needle in check_one_line_error(dse(*argv), argv)


def test_from_an_unknown_framework_or_missing_file_is_one_line(dse, tmp_path):
    for argv, needle in ((["--from", "nemo", "x.yaml"], "--from 'nemo'"),
                         (["--from", "deepspeed", str(tmp_path / "none.json")], "none.json")):
        full = ["estimate", "--model", "llama3-8b", *argv]
        assert needle in check_one_line_error(dse(*full), full)


def test_fp8_options_megatron_does_not_apply_without_fp8_format_are_named_as_ignored(dse):
    """--fp8-param-gather or --fp8-recipe without --fp8-format: Megatron trains in bf16; the import says it ignored
    them (was: dropped without a word)."""
    res = dse("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--from", "megatron",
              "--bf16 --fp8-param-gather --fp8-recipe tensorwise")
    assert res.code == 0, res.err
    assert "--fp8-param-gather" in res.out and "--fp8-recipe" in res.out and "ignored" in res.out
    plan = json.loads(dse("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--from", "megatron",
                          "--bf16 --fp8-param-gather", "--json").out)["plan"]
    assert plan["precision"] == "bf16" and plan["fp8_param_gather"] is False


@pytest.mark.parametrize("emit", ["megatron", "deepspeed", "torchtitan"])
@pytest.mark.parametrize("extra", [["--model", "mixtral-8x7b", "--hw", "h100-cluster", "--dp", "16", "--ep", "8"],
                                   ["--model", "llama3-8b", "--hw", "dgx-h100", "--cp", "2", "--seq-len", "8192"],
                                   ["--model", "llama3-8b", "--hw", "dgx-h100", "--precision", "fp8"],
                                   ["--model", "llama3-8b", "--hw", "workstation-rtx4090-x2", "--finetune", "qlora"]])
def test_emit_is_valid_or_one_line(dse, emit, extra):
    res = dse("estimate", *extra, "--emit", emit, "--json")
    if res.code == 0:
        r = check_estimate_json(res.out)
        assert r["emit"]
    else:
        line = check_one_line_error(res, extra)
        assert emit in line or names_a_given_flag(line, extra), line


def test_html_of_the_new_features_is_one_page(dse, tmp_path):
    for i, extra in enumerate((["--model", "mixtral-8x7b", "--hw", "h100-cluster", "--dp", "16", "--ep", "8"],
                               ["--model", "llama3-8b", "--hw", "dgx-b200", "--precision", "fp8", "--cp", "2"],
                               ["--model", "llama3-8b", "--hw", "workstation-rtx5090", "--finetune", "qlora"])):
        page = tmp_path / f"p{i}.html"
        res = dse("estimate", *extra, "--html", page, "--json")
        assert res.code == 0, res.err
        check_estimate_json(res.out)
        text = page.read_text()
        assert text.startswith("<!DOCTYPE html>") and "NaN" not in text and "Infinity" not in text


SEARCH = [   # (argv, expected exit code, needle of the error)
    (["--model", "mixtral-8x7b", "--hw", "h100-cluster", "--gpus", "32", "--param", "plan.ep=[1,2,4,8]"], 0, None),
    (["--model", "qwen3-30b-a3b", "--hw", "h100-cluster", "--gpus", "32", "-s", "32768",
      "--param", "plan.cp=[1,2,4]", "--param", "plan.ep=[1,4]"], 0, None),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--param", "plan.precision=[bf16,fp8]",
      "--param", "plan.fp8_scaling=[delayed,current]"], 0, None),
    (["--model", "llama3-8b", "--hw", "workstation-rtx4090-x2", "--gpus", "2", "--param",
      "plan.finetune=[full,lora,qlora]", "--param", "plan.stack=[megatron,pytorch]"], 0, None),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--set", "plan.finetune=lora",
      "--param", "plan.lora_rank=[8,64,5000]"], 0, None),
    (["--model", "llama3-8b", "--hw", "dgx-a100-80gb", "--gpus", "8", "--param", "plan.precision=[fp8]"], 0, None),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--param", "plan.lora_targets=[ffn]"], 2,
     "plan.lora_targets"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--param", "plan.precision=[bf16,fp4]"], 2,
     "plan.precision"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--param", "plan.ep=[0,1]"], 2, "plan.ep"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--param", "plan.cp=[0,2]"], 2, "plan.cp"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--set", "plan.finetune=lora",
      "--param", "plan.lora_rank=[0,8]"], 2, "plan.lora_rank"),
    (["--model", "llama3-8b", "--hw", "dgx-h100", "--gpus", "8", "--emit", "nemo"], 2, "--emit"),
]


@pytest.mark.parametrize("argv, code, needle", SEARCH, ids=[" ".join(a[1::2])[:60] for a, _, _ in SEARCH])
def test_search_over_the_new_features_is_json_or_one_line(dse, argv, code, needle):
    res = dse("search", "--engine", "exhaustive", "-q", "--json", "-", "--top", "3", *argv)
    if code == 2:
        assert needle in check_one_line_error(res, argv)
        return
    assert res.code == 0, res.err[-2000:]
    out = json.loads(res.out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert out["points"] >= out["evaluated"] >= out["feasible"] >= 0
    bad = [(p, v) for p, v in _leaves(out.get("best") or {}) if isinstance(v, float) and not math.isfinite(v)]
    assert bad == []
    if out["feasible"] == 0:          # nothing fits or every point broke a rule: the reason is named
        assert out["excluded"] or out["notes"]


@pytest.mark.parametrize("emit", ["megatron", "deepspeed", "torchtitan"])
def test_emit_of_a_lora_plan_says_the_config_trains_every_weight(dse, emit):
    """No stock launch config holds adapters: the emitted config says so (was: a full-training config, silently)."""
    res = dse("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--finetune", "qlora", "--lora-rank", "8",
              "--emit", emit, "--json")
    warnings = json.loads(res.out)["emit"]["warnings"]
    assert any("finetune qlora" in w and "rank 8" in w and "nf4" in w for w in warnings), warnings


def test_emit_deepspeed_of_an_fp8_plan_says_it_wrote_bf16(dse):
    res = dse("estimate", "--model", "llama3-8b", "--hw", "dgx-h100", "--precision", "fp8", "--emit", "deepspeed",
              "--json")
    out = json.loads(res.out)["emit"]
    assert '"bf16"' in out["config"] and any("precision fp8" in w for w in out["warnings"]), out["warnings"]
