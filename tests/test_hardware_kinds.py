"""Hardware kinds: every hardware file says its ``kind:``; one loader; one backend per kind."""

from __future__ import annotations

import json
import warnings

import pytest

from dse import catalog
from dse.errors import InputError
from dse.estimate import estimate
from dse.estimate.backends import BACKENDS, backend
from dse.specs.chiplet import ChipletPackageSpec
from dse.specs.hardware import CHIPLET_PACKAGE, GPU_SYSTEM, HARDWARE_KINDS, SystemSpec

HARDWARE = [(kind, name) for kind, sub in catalog.KIND_DIRS.items() for name in catalog.names(catalog.hw_dir(sub))]


def test_every_listed_hardware_file_states_its_kind(dse):
    r = dse("list", "hardware", "--json")
    assert r.code == 0
    listed = {item["name"]: item.get("kind") for item in r.json()}
    assert listed == {name: kind for kind, name in HARDWARE}
    assert set(listed.values()) == set(HARDWARE_KINDS)


@pytest.mark.parametrize("kind,name", HARDWARE)
def test_load_hardware_builds_the_class_of_the_kind(kind, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)      # shipped files never need the inference
        spec = catalog.load_hardware(name)
    assert spec.kind == kind == catalog.kind_of(name) == catalog.kind_of(spec)
    assert isinstance(spec, {GPU_SYSTEM: SystemSpec, CHIPLET_PACKAGE: ChipletPackageSpec}[kind])
    assert backend(spec) is BACKENDS[kind] and backend(spec).kind == kind


def test_components_are_not_hardware_kinds():
    for sub in set(catalog.COMPONENT_DIRS.values()) - {"systems"}:
        for name in catalog.names(catalog.hw_dir(sub)):
            assert "kind" not in catalog.read_yaml(catalog.hw_dir(sub) / f"{name}.yaml"), (sub, name)


def test_the_kind_specific_loaders_refuse_the_other_kind():
    with pytest.raises(InputError, match="is a chiplet-package, not a gpu-system"):
        catalog.load_system("chiplet-train-8x8")
    with pytest.raises(InputError, match="is a gpu-system, not a chiplet-package"):
        catalog.load_chiplet_package("dgx-a100-80gb")


@pytest.mark.parametrize("sub,name,plan", [("systems", "dgx-a100-80gb", {"tp": 2}),
                                           ("chiplets", "chiplet-train-8x8", {"global_batch": 16})])
def test_a_file_without_kind_still_works_and_warns(tmp_path, sub, name, plan):
    """The README's promise for user files: a hardware YAML from before ``kind:`` loads, with a DeprecationWarning."""
    text = (catalog.hw_dir(sub) / f"{name}.yaml").read_text()
    kind = {"systems": GPU_SYSTEM, "chiplets": CHIPLET_PACKAGE}[sub]
    path = tmp_path / "old.yaml"
    path.write_text(text.replace(f"kind: {kind}\n", ""))
    assert "kind:" not in path.read_text()
    with pytest.warns(DeprecationWarning,
                      match=rf"old.yaml: hardware file without a 'kind:' field.*add 'kind: {kind}'"):
        old = estimate("llama2-70b", str(path), **plan)
    new = estimate("llama2-70b", name, **plan)
    assert old["time"]["iteration"] == new["time"]["iteration"] and old["violations"] == new["violations"]
    with pytest.warns(DeprecationWarning):
        assert catalog.load_hardware(str(path)).kind == kind


def test_the_cli_prints_the_deprecation_as_one_line(dse, tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text((catalog.hw_dir("systems") / "dgx-a100-80gb.yaml").read_text().replace("kind: gpu-system\n", ""))
    r = dse("estimate", "-m", "llama2-7b", "--hw", path, "--json")
    assert r.code == 0 and json.loads(r.out)["hardware"]["name"] == "dgx-a100-80gb"
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: warning: ") and "add 'kind: gpu-system'" in lines[0], r.err


def test_overrides_keep_the_kind_and_cannot_change_it():
    pkg = catalog.load_hardware("chiplet-train-8x8", [(["rows"], 4), (["cols"], 16)])
    assert pkg.kind == CHIPLET_PACKAGE and pkg.dies == 64
    with pytest.raises(InputError, match="--set hardware.kind: 'chiplet-package' is not one of gpu-system"):
        catalog.load_hardware("dgx-a100-80gb", [(["kind"], "chiplet-package")])
