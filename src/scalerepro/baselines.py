"""The published results the papers report (config/baselines.yaml), read for analysis and benchmarks alike."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from scalerepro.errors import UserError


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
