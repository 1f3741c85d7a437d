def test_list_and_show(dse):
    r = dse("list", "models")
    assert r.code == 0 and "gpt2-xl" in r.out
    r = dse("list", "hardware", "--json")
    assert r.code == 0 and any(x["name"] == "a100-cluster-800g" for x in r.json())
    r = dse("show", "model", "gpt2-xl", "--json")
    assert r.code == 0 and r.json()["parameters"] == 1_557_611_200 and r.json()["head_dim"] == 64
    r = dse("show", "hardware", "a100-cluster-800g", "--json")
    assert r.code == 0 and r.json()["node"]["gpu"]["hbm_capacity"] == 80 * 2**30
    r = dse("show", "hardware", "a100-sxm-80gb", "--json")
    assert r.code == 0 and r.json()["kind"] == "gpu"


def test_validate_command(dse):
    r = dse("validate", "formulas")
    assert r.code == 0 and "PASS" in r.out
    r = dse("validate", "nope")
    assert r.code == 2 and "unknown validation suite" in r.err


def test_python_dash_m(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dse", "estimate", "--model", "gpt2-xl", "--hw", "a100-cluster-800g",
                          "--json"], capture_output=True, text=True, check=True)
    assert '"iteration"' in out.stdout
