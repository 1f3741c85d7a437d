"""dse.formulas.package_cost: the Chiplet Actuary reference outputs (note §4a), arrays, the bump quirk."""

import inspect

import numpy as np
import pytest

from dse.formulas import package_cost as P

C7 = P.node_constants("7")


def test_every_public_formula_states_its_equation():
    for name, fn in inspect.getmembers(P, inspect.isfunction):
        if fn.__module__ == P.__name__ and not name.startswith("_"):
            assert "Formula:" in (fn.__doc__ or ""), name


@pytest.mark.parametrize("area, y, n, raw, kgd",
                         [(100, 0.9143, 571.7, 16.35, 17.88), (400, 0.7021, 130.0, 71.90, 102.41),
                                                  (800, 0.4989, 58.8, 158.96, 318.60)])
def test_die_rows_7nm(area, y, n, raw, kgd):
    assert P.die_yield(area, C7["defect_density"]) == pytest.approx(y, abs=5e-5)
    assert P.dies_per_wafer(area) == pytest.approx(n, abs=0.05)
    assert P.raw_die_cost(area, C7["wafer_cost"]) == pytest.approx(raw, abs=5e-3)
    assert P.known_good_die_cost(area, C7["wafer_cost"], C7["defect_density"]) == pytest.approx(kgd, abs=5e-3)


def test_5nm_rows():
    c5 = P.node_constants("5")
    assert P.known_good_die_cost(100, c5["wafer_cost"], c5["defect_density"]) == pytest.approx(33.15, abs=5e-3)
    assert P.known_good_die_cost(800, c5["wafer_cost"], c5["defect_density"]) == pytest.approx(671.59, abs=5e-3)
    assert P.die_yield(800, c5["defect_density"]) == pytest.approx(0.4302, abs=5e-5)


def test_soc_breakdown_organic():
    c = P.package_re_cost(1, 800, "7", "organic")
    assert c["chips"] == pytest.approx(163.0, abs=0.05)
    assert c["chip_defects"] == pytest.approx(159.6, abs=0.05)
    assert c["package"] == pytest.approx(16.0, abs=0.05)
    assert c["package_defects"] == pytest.approx(0.16, abs=0.01)
    assert c["wasted_kgd"] == pytest.approx(3.3, abs=0.05)
    assert c["total"] == pytest.approx(342.0, abs=0.05)


@pytest.mark.parametrize("tech, refs",
                         [("organic", (281.0, 231.0, 215.6, 221.5)), ("fanout", (331.8, 283.6, 277.0, 306.8)),
                                        ("interposer", (378.5, 348.2, 386.3, 547.6))])
def test_split_into_chiplets(tech, refs):
    for n, ref in zip((2, 4, 8, 16), refs):
        assert P.package_re_cost(n, P.split_die_area(800, n), "7", tech)["total"] == pytest.approx(ref, abs=0.05)


def test_organic_optimum_near_eight_chiplets():
    costs = {n: P.package_re_cost(n, P.split_die_area(800, n))["total"] for n in (1, 2, 4, 8, 16)}
    assert min(costs, key=costs.get) == 8


def test_bump_quirk_toggle():
    per_type = P.package_re_cost(8, 110, "7", "interposer")
    per_chip = P.package_re_cost(8, 110, "7", "interposer", bump_per_type=False)
    assert per_chip["chips"] - per_type["chips"] == pytest.approx(7 * 110 * 0.01)
    org = P.package_re_cost(8, 110, "7", "organic", bump_per_type=False)
    assert org["total"] == pytest.approx(P.package_re_cost(8, 110, "7", "organic")["total"])


def test_unknown_node_is_a_keyerror():
    with pytest.raises(KeyError):
        P.node_constants("6")


@pytest.mark.parametrize("tech", P.PACKAGE_TECHNOLOGIES)
def test_arrays_match_scalar_loop(tech):
    n = np.array([1, 2, 4, 8, 16, 64])
    area = P.split_die_area(800.0, n)
    arr = P.package_re_cost(n, area, "7", tech)
    for i in range(len(n)):
        one = P.package_re_cost(int(n[i]), float(area[i]), "7", tech)
        for key, v in one.items():
            assert arr[key][i] == pytest.approx(v), key
    a = np.array([50.0, 100.0, 800.0])
    ys = P.die_yield(a, 0.09)
    assert ys.tolist() == pytest.approx([P.die_yield(float(x), 0.09) for x in a])
