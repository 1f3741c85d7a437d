"""A catalog system with its host at the reference launch price, for tests of mechanisms stated at that price."""

from __future__ import annotations


def reference_host_system(tmp_path, name: str):
    """A YAML copy of system ``name`` whose host's ``dispatch_scale`` is dropped (1: the stacks' reference host;
    the shipped hosts carry measured or transferred scales). Returns its path, for ``--hw``."""
    import yaml

    from dse.catalog import root

    system = yaml.safe_load((root() / "hwspecs" / "systems" / f"{name}.yaml").read_text())
    host = yaml.safe_load((root() / "hwspecs" / "hosts" / f"{system['node']['host']}.yaml").read_text())
    host.pop("dispatch_scale", None)
    system["node"]["host"] = {**host, "name": f"{host['name']}-reference"}
    system["name"] = f"{name}-reference-host"
    path = tmp_path / f"{system['name']}.yaml"
    path.write_text(yaml.safe_dump(system))
    return path
