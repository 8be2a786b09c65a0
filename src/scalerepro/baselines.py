"""The published results the papers report (config/baselines.yaml), read for analysis and benchmarks alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from scalerepro.errors import UserError

DEFAULT = Path("config/baselines.yaml")


def load_baselines(path: Path) -> pd.DataFrame:
    """Published results, each row marked 'published'."""
    if not path.is_file():
        raise UserError(f"baselines file {path} not found; it ships as config/baselines.yaml")
    doc = yaml.safe_load(path.read_text()) or {}
    entries = doc.get("baselines")
    if not isinstance(entries, list):
        raise UserError(f"{path}: expected a top-level 'baselines:' list")
    frame = pd.DataFrame(entries)
    frame["source"] = "published"
    return frame


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
