"""Two commits with different results: `dvc metrics diff` and `dvc plots diff` show the change (dvc.yaml as shipped)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scalerepro.analysis.analyze import analyze
from scalerepro.analysis.collect import collect
from scalerepro.analysis.reproduce import reproduce
from tests.analysis.test_analyze import _fake_run
from tests.support import REPO

DVC = str(Path(sys.executable).parent / "dvc")


def results(repo: Path, rate_n2: float, scratch: Path) -> None:
    """results/metrics.json and results/analysis/*.csv from two faked runs, through collect + analyze."""
    shutil.rmtree(scratch, ignore_errors=True)
    runs = [
        _fake_run(scratch / "r1", "multiring", 1, [0.5, 0.75, 0.8], [50, 100, 100]),
        _fake_run(scratch / "r2", "multiring", 2, [0.4, 0.6, 0.71], [90, rate_n2, rate_n2]),
    ]
    collect(runs, [], scratch / "collect")
    analyze(
        scratch / "collect",
        REPO / "config" / "baselines.yaml",
        repo / "results" / "metrics.json",
        repo / "results" / "analysis",
    )
    reproduce(
        repo / "results" / "analysis",
        REPO / "config" / "papers",
        repo / "results" / "reproduction.md",
        scratch / "reproduction.csv",
        repo / "results" / "reproduction.json",
        "test",
    )


def test_metrics_and_plots_diff_between_two_commits(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(REPO / "dvc.yaml", repo / "dvc.yaml")
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "true",
        "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }

    def run(*cmd: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{cmd}: {proc.stderr}"
        return proc

    run("git", "init", "-q")
    run(DVC, "init", "-q")
    run(DVC, "config", "core.check_update", "false")
    results(repo, 160, tmp_path / "a")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "first results")
    results(repo, 120, tmp_path / "b")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "second results")

    diff = json.loads(run(DVC, "metrics", "diff", "HEAD~1", "HEAD", "--json").stdout)
    changes = diff["results/metrics.json"]
    assert changes["runs.multiring-n2-g1-s0-r0.images_per_s"] == {"old": 160.0, "new": 120.0, "diff": -40.0}
    assert changes["scaling.multiring-g1-n2.efficiency"]["new"] < changes["scaling.multiring-g1-n2.efficiency"]["old"]

    cards = diff[
        "results/reproduction.json"
    ]  # a claim's measured value (here Cho et al.'s efficiency, of their multiring) moved
    moved = cards["Cho et al. 2017.cho-scaling-95.value"]
    assert moved["new"] < moved["old"]

    plots = json.loads(run(DVC, "plots", "diff", "HEAD~1", "HEAD", "--json", "--split").stdout)
    (scaling,) = plots["data"]["results/analysis/scaling.csv"]
    assert scaling["revisions"] == ["HEAD~1", "HEAD"]
    points = {
        (r["rev"], r["world_size"]): float(r["images_per_s"])
        for r in scaling["anchor_definitions"]["<DVC_METRIC_DATA>"]
    }
    assert points[("HEAD~1", "2")] == 160.0
    assert points[("HEAD", "2")] == 120.0
    assert {"results/analysis/tta.csv", "results/analysis/busbw.csv"} <= set(plots["data"])
