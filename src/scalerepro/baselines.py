"""Published results, read for analysis and benchmarks alike: config/baselines.yaml's and the papers' own.

config/baselines.yaml holds other works' results and names, with
``papers:``, the folder of the reproduced papers' files
(:mod:`scalerepro.papers`), whose ``baselines:`` are read with it.

Every number of an entry is either stated by a registered fact (``stated: {field: source#fact}``) or
derived by stated arithmetic (``derived: {field: how}``); the loader refuses one that is neither, and
a reference the source registry (config/sources.yaml) does not hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from scalerepro import papers, sources
from scalerepro.errors import UserError
from scalerepro.io import read_yaml

DEFAULT = Path("config/baselines.yaml")
NUMBERS = ("accelerators", "global_batch", "epochs", "top1", "time_s", "images_per_s", "scaling_efficiency")


def load_baselines(path: Path) -> pd.DataFrame:
    """Published results, each row marked 'published', with its source's identifier as ``cite`` and, for a
    reproduced paper's own, that paper's title as ``paper``."""
    doc = read_yaml(path, "baselines")
    entries = doc.get("baselines") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise UserError(f"{path}: expected a top-level 'baselines:' list")
    registry = sources.load_beside(path, doc)
    rows = [_checked(registry, path, f"baselines[{i}]", e) for i, e in enumerate(entries)]
    for paper in papers.load_papers(path.parent / str(doc["papers"])) if doc.get("papers") else []:
        rows += [
            _checked(registry, paper.path, f"baselines[{i}]", e) | {"paper": paper.title}
            for i, e in enumerate(paper.baselines)
        ]
    frame = pd.DataFrame(rows)
    frame["source"] = "published"
    return frame


def _checked(registry: sources.Registry, path: Path, index: str, entry: Any) -> dict[str, Any]:
    """One entry with its source resolved: every number stated by a registered fact or derived."""
    if not isinstance(entry, dict) or not entry.get("work"):
        raise UserError(f"{path}: {index} must be a mapping with a 'work'")
    where = f"{path}: {index} ({entry['work']})"
    source = registry.source(str(entry.get("source")), where)
    stated, derived = entry.get("stated") or {}, entry.get("derived") or {}
    for field, ref in stated.items():
        registry.facts(ref, f"{where}, stated.{field}")
    bare = [k for k in NUMBERS if entry.get(k) is not None and k not in stated and k not in derived]
    if bare:
        raise UserError(
            f"{where}: {bare[0]} = {entry[bare[0]]} names no source; add stated.{bare[0]}: <source id>#<fact key> "
            f"(config/sources.yaml) or derived.{bare[0]}: how it is computed"
        )
    cites = {k: "; ".join(f.cite() for f in registry.facts(v, where)) for k, v in stated.items()}
    return {**entry, "cite": source.identifier, "source_id": source.id, "cites": cites}


def default_path() -> Path:
    """config/baselines.yaml of the working directory, else of the source checkout this package runs from."""
    checkout = Path(__file__).resolve().parents[2] / DEFAULT
    return DEFAULT if DEFAULT.is_file() or not checkout.is_file() else checkout


def published_per_accelerator(path: Path, model: str) -> list[dict[str, Any]]:
    """Published images/s per accelerator for ``model`` from a baselines file (the entries that give a rate)."""
    frame = load_baselines(path)
    if "model" not in frame.columns:
        return []
    rows = frame[(frame["model"] == model) & frame["images_per_s"].notna() & frame["accelerators"].notna()]
    return [
        {
            "work": r["work"],
            "hardware": r.get("hardware"),
            "cite": r.get("cite"),
            "images_per_s_per_accelerator": float(r["images_per_s"]) / float(r["accelerators"]),
        }
        for _, r in rows.iterrows()
    ]
