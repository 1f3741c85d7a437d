"""Where a model given as a directory or a Hugging Face repository id keeps its ``config.json``, offline.

``--model DIR`` reads ``DIR/config.json``. ``--model org/name`` (a repository id, when no such file or directory
exists) is looked up in the local Hugging Face hub cache, as ``huggingface_hub`` lays it out
(https://huggingface.co/docs/huggingface_hub/guides/manage-cache): ``<cache>/models--org--name/refs/main`` holds
the revision (a commit hash) whose files are in ``<cache>/models--org--name/snapshots/<revision>/``. The cache is
``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``. Nothing is downloaded and
``huggingface_hub`` is not imported; a model that is not there is a one-line error saying where dse looked.

Before the cache, dse looks in the configs it ships, ``models/hf/<org>/<name>/config.json`` (the popular open models
people train, written from cited sources: models/hf/SOURCE.md): ``--model org/name`` or the bare ``--model name``,
in any case (:func:`shipped_config`).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from dse.errors import InputError

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache() -> Path:
    """The Hugging Face hub cache directory: ``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def cached_config(repo_id: str, cache: Path | None = None) -> Path:
    """``config.json`` of the main revision of ``repo_id`` in the hub cache, or an :class:`InputError`.

    The revision is ``refs/main``; a cache entry without that file (a snapshot fetched by commit) is used when it
    holds exactly one snapshot.
    """
    org, name = repo_id.split("/")
    repo = (cache or hub_cache()) / f"models--{org}--{name}"
    if not repo.is_dir():
        raise InputError(f"--model {repo_id}: no such file or directory, not shipped (`dse list`), and not in the "
                         "Hugging Face cache "
                         f"(looked for {repo}; dse does not download: fetch it with `huggingface-cli download "
                         f"{repo_id} config.json`, or pass the directory holding config.json)")
    ref = repo / "refs" / "main"
    snapshots = repo / "snapshots"
    if ref.is_file():
        revision = ref.read_text().strip()
    else:
        found = sorted(p.name for p in snapshots.iterdir()) if snapshots.is_dir() else []
        if len(found) != 1:
            raise InputError(f"--model {repo_id}: {ref} is missing and {snapshots} holds {len(found)} snapshots; "
                             "pass the snapshot directory")
        revision = found[0]
    path = snapshots / revision / "config.json"
    if not path.is_file():
        raise InputError(f"--model {repo_id}: the cached revision {revision} has no config.json (looked for {path})")
    return path


def config_path(ref: str) -> tuple[Path, str]:
    """The ``config.json`` a model reference names and the model's name: ``ref`` is a directory (its name), or a
    repository id in the cache (the repository's name)."""
    path = Path(ref)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise InputError(f"{path}: directory without a config.json")
        return config, path.resolve().name
    if path.exists() or not _REPO_ID.match(ref):
        raise InputError(f"{ref}: no such file (a model is a catalog name, a .yaml or config.json file, a directory "
                         "holding config.json, or org/name in the Hugging Face cache)")
    return cached_config(ref), ref.split("/")[1]


@lru_cache(maxsize=1)
def shipped() -> dict[str, Path]:
    """The shipped Hugging Face configs: repository id ``org/name`` -> ``models/hf/org/name/config.json``."""
    from dse.catalog import models_dir

    return {f"{p.parent.parent.name}/{p.parent.name}": p for p in sorted((models_dir() / "hf").glob("*/*/config.json"))}


def shipped_names() -> list[str]:
    """Every shipped repository id and bare name (for suggestions)."""
    return [n for hub in shipped() for n in (hub, hub.split("/")[1])]


def shipped_config(ref: str) -> tuple[Path, str] | None:
    """The shipped ``config.json`` that ``ref`` names and the model's name (the repository's), or None: ``ref`` is a
    repository id ``org/name`` or a bare ``name``, compared without case (``gpt2`` is openai-community/gpt2). A bare
    name two organizations share is an error listing both."""
    low = ref.lower()
    index = shipped()
    hits = [hub for hub in index if hub.lower() == low] or [hub for hub in index if hub.split("/")[1].lower() == low]
    if len(hits) > 1:
        raise InputError(f"--model {ref}: names {len(hits)} shipped configs ({', '.join(hits)}); give org/name")
    return (index[hits[0]], hits[0].split("/")[1]) if hits else None
