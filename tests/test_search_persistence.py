"""Studies persist and are shared: SIGKILL and resume, several workers on one study.

Real processes (``python -m dse search``) against real storages: an SQLite file,
optuna's journal file, and a PostgreSQL server this module starts itself on
loopback from Debian's ``postgresql`` package (``apt-get install -y postgresql``;
.ci/run installs it) with psycopg2 from PyPI (the ``test`` extra).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

SPACE = {"name": "persist", "model": "llama2-70b", "hardware": "a100-cluster-800g",
         "fixed": {"plan.global_batch": 512, "plan.seq_len": 4096},
         "parameters": {"gpus": [64, 128], "plan.tp": [1, 2, 4, 8], "plan.pp": [1, 2, 4, 8, 16],
                        "plan.micro_batch": [1, 2, 4, 8], "plan.zero": [0, 1, 2, 3],
                        "plan.recompute": ["none", "selective", "full"]},
         "objectives": ["time"]}
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def space_file(tmp_path):
    f = tmp_path / "space.yaml"
    f.write_text(yaml.safe_dump(SPACE))
    return f


def command(space_file, storage, study, trials, seed=0):
    return [sys.executable, "-m", "dse", "search", "--space", str(space_file), "--engine", "optuna",
            "--trials", str(trials), "--storage", storage, "--study", study, "--seed", str(seed), "-q"]


def load(storage, study):
    import optuna

    from dse.search.storage import _open

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=study, storage=_open(storage))


def complete(storage, study):
    import optuna

    try:
        s = load(storage, study)
    except (KeyError, Exception):   # not created yet
        return []
    return s.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def kill_and_resume(space_file, storage, study, trials=120, kill_after=30):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command(space_file, storage, study, trials), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(complete(storage, study)) < kill_after:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, "the worker made no progress"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    before = {t.number: (t.params, t.value) for t in complete(storage, study)}
    assert kill_after <= len(before) < trials
    rc = subprocess.run(command(space_file, storage, study, trials), cwd=ROOT, env=env, capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    after = {t.number: (t.params, t.value) for t in complete(storage, study)}
    assert len(after) == trials                      # the study holds exactly the trials asked for
    assert all(after[n] == v for n, v in before.items())   # every trial completed before the kill is kept


def two_workers(space_file, storage, study, trials=60):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(command(space_file, storage, study, trials, seed=s), cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "Top" in out
    done = complete(storage, study)
    # each worker stops once the study holds `trials`; the other may be finishing one trial then
    assert trials <= len(done) <= trials + 1
    workers = {t.user_attrs["dse"]["worker"] for t in done}
    assert len(workers) == 2                          # both processes contributed to the one study
    assert len({t.number for t in done}) == len(done)


@pytest.mark.slow
def test_sigkill_then_resume_sqlite(space_file, tmp_path):
    kill_and_resume(space_file, f"sqlite:///{tmp_path / 'study.db'}", "killed")


@pytest.mark.slow
def test_sigkill_then_resume_journal(space_file, tmp_path):
    kill_and_resume(space_file, f"journal:{tmp_path / 'study.log'}", "killed", trials=200, kill_after=60)


@pytest.mark.slow
def test_two_workers_share_a_sqlite_study(space_file, tmp_path):
    two_workers(space_file, f"sqlite:///{tmp_path / 'shared.db'}", "shared")


@pytest.mark.slow
def test_two_workers_share_a_journal_study(space_file, tmp_path):
    two_workers(space_file, f"journal:{tmp_path / 'shared.log'}", "shared", trials=120)


# ----------------------------------------------------------------------------- PostgreSQL


def _pg_bin(name):
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        pytest.fail(f"PostgreSQL server binaries ({name}) not found: apt-get install -y postgresql (see .ci/run)")
    return found


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """A private PostgreSQL cluster on loopback, started for these tests and removed after."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    base = tempfile.mkdtemp(prefix="dse-pg-")
    data, sock, log = os.path.join(base, "data"), os.path.join(base, "sock"), os.path.join(base, "log")
    os.makedirs(sock)
    as_user = []
    if os.geteuid() == 0:                     # the server refuses to run as root: use the package's user
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run(as_user + [initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                   check=True, capture_output=True)
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50"
    subprocess.run(as_user + [pg_ctl, "-D", data, "-o", opts, "-l", log, "-w", "-t", "60", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_user + [pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.postgres
@pytest.mark.slow
def test_two_workers_share_a_postgresql_study(space_file, postgres_url):
    two_workers(space_file, postgres_url, "shared-pg")


@pytest.mark.postgres
@pytest.mark.slow
def test_sigkill_then_resume_postgresql(space_file, postgres_url):
    kill_and_resume(space_file, postgres_url, "killed-pg", trials=80, kill_after=25)
