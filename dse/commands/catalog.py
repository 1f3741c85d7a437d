"""``dse list`` and ``dse show``: the shipped catalog, and one resolved model or hardware spec."""
# ruff: noqa: UP006, UP035, UP045
# (typer reads the annotations: Optional[...] and List[...] kept as they were in dse/cli.py)

from __future__ import annotations

from typing import List, Literal

import typer

from dse.commands.options import _console, _print_json


def list_(what: Literal["models", "hardware", "components"] = typer.Argument("models",
                                                                             help="models | hardware | components"),
          json_out: bool = typer.Option(False, "--json")):
    """List the shipped catalog."""
    from dse import catalog
    from dse.report.console import render_list

    if what == "models":
        items = [(n, catalog.read_yaml(catalog.models_dir() / f"{n}.yaml"))
                 for n in catalog.names(catalog.models_dir())]
    elif what == "hardware":
        items = [(n, catalog.read_yaml(catalog.hw_dir(sub) / f"{n}.yaml"))
                 for sub in ("systems", "chiplets") for n in catalog.names(catalog.hw_dir(sub))]
    else:
        items = [(f"{sub}/{n}", catalog.read_yaml(catalog.hw_dir(sub) / f"{n}.yaml"))
                 for sub in sorted(set(catalog.COMPONENT_DIRS.values()) - {"systems"})
                 for n in catalog.names(catalog.hw_dir(sub))]
    hub = _shipped_hub() if what == "models" else {}
    if json_out:
        _print_json([{"name": n, **{k: v for k, v in d.items() if k != "name"}} for n, d in items]
                    + [{"name": n, "hf_config": where} for n, where in hub.items()])
        return
    render_list(_console(), what, items, hub)


def _shipped_hub() -> dict[str, str]:
    """The shipped Hugging Face configs: repository id -> file (relative to the catalog)."""
    from dse import catalog
    from dse.hf_cache import shipped

    return {hub: path.relative_to(catalog.root()).as_posix() for hub, path in shipped().items()}


def show(kind: Literal["model", "hardware"] = typer.Argument(..., help="model | hardware"),
         name: str = typer.Argument(..., help="catalog name or file"),
         set_: List[str] = typer.Option([], "--set", help="override fields before showing"),
         json_out: bool = typer.Option(False, "--json")):
    """Show a resolved model or hardware spec (defaults filled in, units in SI)."""
    import dataclasses

    from dse import catalog
    from dse.specs import _schema

    ov = [_schema.parse_assignment(x) for x in set_]
    if kind == "model":
        spec = catalog.load_model(name, [(p[1:] if p[0] == "model" else p, v) for p, v in ov])
        data = dataclasses.asdict(spec)
        from dse.estimate.parameters import model_parameters

        data["parameters"], active = model_parameters(spec)
        if spec.experts:
            data["active_parameters"] = active
    else:
        if ov:
            spec = catalog.load_hardware(name, [(p[1:] if p[0] in ("hardware", "hw") else p, v) for p, v in ov])
            kind_name = spec.kind
        else:
            kind_name, spec = catalog.find_hardware(name)
        data = {"kind": kind_name, **dataclasses.asdict(spec)}
    if json_out:
        _print_json(data)
        return
    from dse.report.console import render_spec

    render_spec(_console(), kind, data)
