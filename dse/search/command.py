"""The ``dse search`` command behind :mod:`dse.cli`: flags -> space -> search -> output.

Without ``--space`` the flags describe the common case: a model on a system with
``--gpus N`` GPUs (default: all of the system's), searching tensor, pipeline and
data parallelism, micro-batch, ZeRO stage, recompute and sequence parallelism at a
fixed global batch. With ``--space FILE`` the flags override the file:
``--model``/``--hw`` replace its choices, ``--objective`` its objectives,
``--budget``/``--power-cap``/``--min-ssd-lifetime`` set constraints, ``--param``
adds or replaces a parameter (``--param plan.zero=[0,1]``), ``--set`` fixes a field.
"""

from __future__ import annotations

import math
import sys

from dse.errors import InputError


def flag_space_data(model: str, hardware: str, gpus: int | None, global_batch: int | None,
                    seq_len: int | None) -> dict:
    """The default space for ``dse search --model M --hw H [--gpus N]``."""
    from dse.catalog import load_model, load_system

    m = load_model(model)
    s = load_system(hardware)
    n = gpus or s.gpus
    if n > s.gpus:
        raise InputError(f"--gpus {n}: {s.name} has {s.gpus} GPUs ({s.nodes} nodes of {s.node.gpus_per_node})")
    gb = global_batch or n * math.ceil(512 / n)
    pow2 = lambda hi: [2 ** k for k in range(int(math.log2(max(1, hi))) + 1)]  # noqa: E731
    fixed = {"plan.global_batch": gb}
    if seq_len:
        fixed["plan.seq_len"] = seq_len
    return {
        "name": f"{m.name}-{n}gpus",
        "model": model,
        "hardware": hardware,
        "fixed": fixed,
        "parameters": {
            "gpus": n,
            "plan.tp": pow2(min(s.node.gpus_per_node, n)),
            "plan.pp": pow2(min(m.layers, n)),
            "plan.micro_batch": pow2(min(16, gb)),
            "plan.zero": [0, 1, 2, 3],
            "plan.recompute": ["none", "selective", "full"],
            "plan.sequence_parallel": [False, True],
        },
    }


def build_space(space_file, model, hw, gpus, global_batch, seq_len, objectives, budget, power_cap,
                min_ssd_lifetime, params, sets):
    """A :class:`~dse.search.space.Space` from a file and/or flags (see the module docstring)."""
    from dse.catalog import read_yaml
    from dse.search.objectives import constraint_bound
    from dse.search.space import from_dict
    from dse.specs._schema import parse_assignment

    if space_file:
        data = read_yaml(space_file, "search space")
        source = str(space_file)
        if model:
            data["model"] = model
        if hw:
            data["hardware"] = hw
        if gpus:
            data.setdefault("parameters", {})
            if not isinstance(data["parameters"], dict):
                raise InputError(f"{source}: parameters: expected a mapping of dotted.path: values")
            data["parameters"]["gpus"] = gpus
        if global_batch:
            data.setdefault("fixed", {})["plan.global_batch"] = global_batch
        if seq_len:
            data.setdefault("fixed", {})["plan.seq_len"] = seq_len
    else:
        if not model or not hw:
            raise InputError("dse search needs --space FILE, or --model and --hw (with optional --gpus N)")
        data = flag_space_data(model, hw, gpus, global_batch, seq_len)
        source = "flags"
    if objectives:
        data["objectives"] = list(objectives)
    given = data.get("constraints") or {}
    cons = dict(given) if isinstance(given, dict) else data["constraints"]
    for key, v in (("budget", budget), ("power_cap", power_cap), ("min_ssd_lifetime", min_ssd_lifetime)):
        if v is not None:
            constraint_bound(key, v, "--" + key.replace("_", "-"))    # a bad flag is named as the flag
            cons[key] = v
    if cons:
        data["constraints"] = cons
    for text in params:
        path, value = parse_assignment(text, "--param")
        data.setdefault("parameters", {})
        data["parameters"] = {k: v for k, v in data["parameters"].items() if k != ".".join(path)}
        data["parameters"][".".join(path)] = value
    for text in sets:
        path, value = parse_assignment(text, "--set")
        data.setdefault("fixed", {})
        if not isinstance(data["fixed"], dict):
            raise InputError(f"{source}: fixed: expected a mapping of dotted.path: value")
        data["fixed"][".".join(path)] = value
    return from_dict(data, source)


def run(*, space_file, model, hw, gpus, global_batch, seq_len, objectives, budget, power_cap, min_ssd_lifetime,
        params, sets, engine, trials, seed, storage, study, top, json_path, csv_path, plot_path, chunk, quiet,
        sampler=None, emit=None, html=None) -> int:
    """Everything ``dse search`` does; returns the exit status."""
    from rich.console import Console

    from dse.search import output
    from dse.search.runner import DEFAULT_CHUNK, choose_engine, search

    if emit is not None:
        from dse.frameworks import FRAMEWORKS

        if emit not in FRAMEWORKS:            # before the search, not after it
            raise InputError(f"--emit {emit!r}: expected one of {', '.join(FRAMEWORKS)}")
    space = build_space(space_file, model, hw, gpus, global_batch, seq_len, objectives, budget, power_cap,
                        min_ssd_lifetime, params, sets)
    engine = engine or space.defaults.get("engine", "auto")
    trials = trials if trials is not None else space.defaults.get("trials", 300)
    seed = seed if seed is not None else space.defaults.get("seed", 0)
    top = top if top is not None else space.defaults.get("top", 10)
    chunk = chunk or DEFAULT_CHUNK
    if chunk < 1:
        raise InputError(f"--chunk {chunk}: must be at least 1")
    chosen, _ = choose_engine(space, engine, chunk)
    if chosen == "exhaustive":
        from dse._process import tune_allocator

        tune_allocator()                 # a process-wide setting: the command's to make, not the library's
    samplers = ("tpe", "nsga2", "nsga3", "ga+tpe")
    if sampler is not None and sampler not in samplers:
        raise InputError(f"--sampler {sampler!r} is not one of {', '.join(samplers)}")
    settings = {"single": sampler, "multi": sampler} if sampler else None
    if chosen == "optuna":
        from dse.search.storage import open_storage

        open_storage(storage)            # an unreachable storage fails before anything starts
    if plot_path:
        from dse.report.plots import check

        check(plot_path)                 # fail before the search when matplotlib is missing
    if html:
        from dse.report.page import check_path

        check_path(html)                 # fail before the search, not after it
    if json_path == "-" and csv_path == "-":
        raise InputError("--json - and --csv -: only one of them can write to stdout")
    exporter = output.Exporter(space, json_path, csv_path)
    to_stdout = "-" in (json_path, csv_path)
    con = Console(stderr=to_stdout)
    if not con.is_terminal:      # a file or a pipe: do not wrap the table at 80 columns
        con = Console(stderr=to_stdout, width=240)
    out = None
    try:
        with output.Progress(space, chosen, enabled=not quiet) as prog:
            out = search(space, engine=engine, trials=trials, seed=seed, storage=storage, study=study, top=top,
                         chunk=chunk, progress=prog, sink=exporter if exporter.active else None, sampler=settings)
        if emit is not None and out["ranked"]:
            out["emit"] = emit_best(space, out["ranked"][0], emit)
    except KeyboardInterrupt:
        kept = " (completed optuna trials stay in the study: run again with the same --storage and --study)" \
            if chosen == "optuna" else ""
        sys.stderr.write(f"dse: interrupted{kept}\n")
        return 130
    finally:
        exporter.close(out)
    output.render(con, space, out)
    if plot_path:
        from dse.report.plots import search_result

        search_result(plot_path, space, out)
        con.print(f"plot written to {plot_path}")
    if html:
        from dse.report.page_search import write_search

        write_search(html, space, out)
        con.print(f"HTML report written to {html}")
    return 0


def emit_best(space, best: dict, framework: str) -> dict:
    """The best point (front point #1 of a Pareto search) as a framework config (:mod:`dse.frameworks.emit`)."""
    from dse.frameworks.emit import emit
    from dse.search.runner import resolve_point

    return emit(framework, *resolve_point(space, best["params"]))
