"""Where optuna studies live: a local SQLite file by default, or any optuna storage.

``--storage`` takes

- an SQLAlchemy URL optuna's RDBStorage accepts: ``sqlite:///file.db``,
  ``postgresql://user@host:5432/db`` (needs ``psycopg2``: ``pip install 'dse[postgres]'``),
  ``mysql+pymysql://...``;
- ``journal:PATH`` (or a path ending in ``.log``/``.journal``): optuna's
  JournalStorage in an append-only file, which also works on NFS;
- a plain path: an SQLite file;
- ``memory``: optuna's in-memory storage (nothing persists; for tests and scripts).

Several ``dse search`` processes given the same storage and ``--study`` name
cooperate on one study (each asks optuna for the next trial). RDB storages get a
heartbeat, so a trial whose process was killed is marked failed after
``GRACE_SECONDS`` and does not linger as running.
"""

from __future__ import annotations

import os
import re
import time
import warnings

from dse.errors import InputError

DEFAULT = "sqlite:///dse-search.db"
HEARTBEAT_SECONDS = 20
GRACE_SECONDS = 60
CONNECT_TIMEOUT = 5
# Errors of two workers creating optuna's tables in an empty database at the same moment.
RACES = ("already exists", "duplicate key", "unique constraint", "database is locked")


def redact(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def normalise(url: str | None) -> str:
    if not url:
        return DEFAULT
    if url in ("memory", ":memory:") or url.startswith("journal:") or "://" in url:
        return url
    if url.endswith((".log", ".journal", ".jsonl")):
        return "journal:" + url
    return "sqlite:///" + url


def with_driver(url: str) -> str:
    """A bare ``postgresql://`` (or ``postgres://``) URL names the PostgreSQL driver that is installed.

    SQLAlchemy 2.1 maps a bare ``postgresql://`` to psycopg 3, 2.0 to psycopg2; ``dse[postgres]``
    installs psycopg2. The bare scheme is rewritten to ``postgresql+psycopg2://`` when psycopg2 is
    importable and psycopg 3 is not (and to ``postgresql+psycopg://`` in the opposite case); a URL
    naming its driver (``postgresql+...://``) is left as it is.

    >>> with_driver("sqlite:///a.db")
    'sqlite:///a.db'
    >>> with_driver("postgresql+pg8000://u@h/db")
    'postgresql+pg8000://u@h/db'
    """
    from importlib.util import find_spec

    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("postgresql", "postgres"):
        return url
    has2, has3 = find_spec("psycopg2") is not None, find_spec("psycopg") is not None
    if has2 and not has3:
        return "postgresql+psycopg2://" + rest
    if has3 and not has2:
        return "postgresql+psycopg://" + rest
    return "postgresql://" + rest if scheme.lower() == "postgres" else url


_OPENED: dict = {}


def open_storage(url: str | None):
    """An optuna storage object for ``url`` (see the module docstring); one-line errors.

    Opened once per process and URL (connecting to a database takes most of a second).
    """
    url = normalise(url)
    if url not in _OPENED or url in ("memory", ":memory:"):
        _OPENED[url] = _open(url)
    return _OPENED[url]


def _open(url: str):
    from dse._optional import require

    optuna = require("optuna", "search", "dse search with the optuna engine")
    shown = redact(url)
    if url in ("memory", ":memory:"):
        return optuna.storages.InMemoryStorage()
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        if path.startswith("//"):
            path = path[2:]
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise InputError(f"--storage {shown}: directory {folder} does not exist")
        journal = optuna.storages.journal if hasattr(optuna.storages, "journal") else None
        try:
            if journal is not None and hasattr(journal, "JournalFileBackend"):
                backend = journal.JournalFileBackend(path)
            else:  # optuna < 4
                backend = optuna.storages.JournalFileStorage(path)
            return optuna.storages.JournalStorage(backend)
        except OSError as exc:
            raise InputError(f"--storage {shown}: cannot open the journal file ({exc.strerror or exc})") from None
    url = with_driver(url)
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("postgresql", "postgres", "postgresql+psycopg2"):
        require("psycopg2", "postgres", f"--storage {shown}")
    if scheme.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        folder = os.path.dirname(os.path.abspath(path)) if path and path != ":memory:" else ""
        if folder and not os.path.isdir(folder):
            raise InputError(f"--storage {shown}: directory {folder} does not exist")
    engine_kwargs = {}
    if scheme.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}      # wait for other workers' writes
    elif scheme.startswith(("postgresql", "postgres")):
        engine_kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT}}
    elif scheme.startswith("mysql"):
        engine_kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT}}
    try:
        for attempt in range(5):
            try:
                with warnings.catch_warnings():   # the heartbeat is an "experimental" optuna feature
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                                         heartbeat_interval=HEARTBEAT_SECONDS,
                                                         grace_period=GRACE_SECONDS)
                break
            except Exception as exc:   # two workers creating optuna's tables at once: one loses, retries
                text = str(exc).lower()
                if attempt == 4 or not any(k in text for k in RACES):
                    raise
                time.sleep(0.2 * (attempt + 1))
        if scheme.startswith("sqlite"):
            _sqlite_wal(storage.engine)
        return storage
    except ModuleNotFoundError as exc:
        hint = " (pip install 'dse[postgres]' for psycopg2)" if "psycopg" in str(exc) else ""
        raise InputError(f"--storage {shown}: the database driver is not installed: {exc.name}{hint}") from None
    except Exception as exc:  # sqlalchemy errors (unreachable host, bad credentials, bad URL)
        msg = " ".join(str(getattr(exc, "orig", None) or exc).split())
        msg = re.sub(r"\(Background on this error.*", "", msg).strip()
        raise InputError(f"--storage {shown}: cannot open the study storage: {msg[:300]}") from None


def _sqlite_wal(engine) -> None:
    """Write-ahead log, synchronous=NORMAL: a commit no longer waits for the disk (an order of
    magnitude faster per trial); a killed process still keeps every committed trial, and
    several processes on one machine can share the file."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record):
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    engine.dispose()
