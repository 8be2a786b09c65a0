"""The papers this project reproduces: one file each in config/papers/, everything taken from one paper in it.

A paper's id is its file's name, ``<id>.yaml``, and the id of its source
in config/sources.yaml (which says what of it the project holds). The
file's keys:

``title``
    how cards, tables and metrics name the paper (``Kumar et al. 2017``).
``preset``
    the configuration of its experiment, laid over config/cluster.yaml
    (a path relative to the paper's file).
``methods``
    the all-reduce algorithms the project runs as the paper's own, by
    name: for each, the ``reading`` of the paper the algorithm rests on (in
    a sentence) and the ``sources`` facts it is read from. The cards say
    which algorithm they judged and on what it rests.
``baselines``
    its published results, in config/baselines.yaml's entry format
    (:mod:`scalerepro.baselines`), each number stated by a registered
    fact or derived.
``claims``
    what its card judges (:mod:`scalerepro.analysis.reproduce`): an
    ``id`` unique over all papers, the claim in this project's words, and
    ``source: <source id>#<fact key>`` (the registered fact that states
    it) or ``unverified:`` (what would verify it, with ``related:`` facts
    it is read from); ``published``, as the source gives it; ``scope``
    and ``measure``, what a measurement must have been made on and how this
    run makes it. A claim a simulation at the paper's scale speaks to
    carries ``at_scale:`` (:mod:`scalerepro.sim.claims`): what the
    simulation runs (``simulates``), on which platform of
    config/platforms.yaml (by its name), with which ``algorithm`` (and
    ``over``, for a ratio), ``ranks``, ``dtype``, ``metric``, the
    ``published`` number of the claim's source fact (null where it gives
    none) and ``if_off``, what would have to change if the published figure
    lies outside the simulated band. Its simulated row carries the claim's
    id, so the card finds it by id.

Everything here is referred to by id: a paper by its file's name, a claim
by its ``id``, a fact by ``<source id>#<fact key>``, a platform by its
name; an unknown one is an error naming the file and the id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerepro import sources
from scalerepro.errors import UserError
from scalerepro.io import read_yaml

DEFAULT = Path("config/papers")
KEYS = ("title", "preset", "methods", "baselines", "claims")
CLAIM_KEYS = ("id", "claim", "source", "unverified", "related", "published", "scope", "measure", "at_scale")


@dataclass(frozen=True)
class Method:
    """An algorithm run as a paper's own: its name, the reading of the paper it rests on, the cited facts."""

    algorithm: str
    reading: str
    cites: tuple[str, ...]


@dataclass(frozen=True)
class Paper:
    """One paper's file, its references resolved: ``cite`` and ``held`` from its source, ``claims`` with ``cite``."""

    id: str
    title: str
    path: Path
    cite: str
    held: str
    preset: Path
    baselines: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    methods: tuple[Method, ...] = ()

    def preset_arg(self) -> str:
        """The preset as a path from the working directory, for a ``--configfile`` line."""
        return os.path.relpath(self.preset)


def files(folder: Path) -> list[Path]:
    """The paper files of ``folder``, by id; an error naming the folder if it holds none."""
    found = sorted(Path(folder).glob("*.yaml"))
    if not found:
        raise UserError(f"{folder}: no paper files (<id>.yaml); config/papers/ ships with the project")
    return found


def load_papers(folder: Path) -> list[Paper]:
    """Every paper of ``folder``, checked: known keys, a registered id, an existing preset, claims with unique ids
    and a registered source fact (resolved into ``cite``) or ``unverified``."""
    papers = [load_paper(path) for path in files(folder)]
    seen: dict[str, Path] = {}
    for paper in papers:
        for claim in paper.claims:
            if claim["id"] in seen:
                raise UserError(f"{paper.path}: claim id {claim['id']!r} is used in {seen[claim['id']]} too")
            seen[claim["id"]] = paper.path
    return papers


def load_paper(path: Path) -> Paper:
    """One paper file, checked (see :func:`load_papers`)."""
    doc = read_yaml(path, "papers")
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a paper file is a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(set(doc) - {*KEYS, "sources_file"})
    if unknown:
        raise UserError(f"{path}: unknown key {unknown[0]!r}; a paper file has {', '.join(KEYS)}")
    registry = sources.load_beside(path, doc, default=f"../{sources.DEFAULT.name}")  # config/papers/ -> config/
    source = registry.source(path.stem, f"{path} (a paper's id is its source's id)")
    preset = path.parent / str(doc.get("preset"))
    if not doc.get("preset") or not preset.is_file():
        raise UserError(f"{path}: preset {doc.get('preset')!r} is not a file (a path relative to {path.parent})")
    if not doc.get("title"):
        raise UserError(f"{path}: needs `title:`, how the cards name the paper")
    return Paper(
        id=path.stem,
        title=str(doc["title"]),
        path=path,
        cite=source.identifier,
        held=source.held,
        preset=preset.resolve(),
        baselines=_mappings(path, doc, "baselines"),
        claims=[_claim(registry, path, c) for c in _mappings(path, doc, "claims")],
        methods=_methods(registry, path, doc.get("methods") or {}),
    )


def _methods(registry: sources.Registry, path: Path, entries: Any) -> tuple[Method, ...]:
    """``methods:``, each with a ``reading`` and registered ``sources`` facts; errors name the file and algorithm."""
    if not isinstance(entries, dict):
        raise UserError(f"{path}: `methods:` maps algorithm names to {{reading, sources}}")
    out = []
    for name, body in entries.items():
        where = f"{path}: method {name!r}"
        if not isinstance(body, dict) or not body.get("reading") or not body.get("sources"):
            raise UserError(f"{where}: needs `reading:` (what of the paper it rests on) and `sources:` (facts)")
        cites = tuple(registry.fact(ref, where).cite() for ref in body["sources"])
        out.append(Method(str(name), str(body["reading"]), cites))
    return tuple(out)


def _mappings(path: Path, doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """``doc[key]``, a list of mappings (none: empty)."""
    items = doc.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise UserError(f"{path}: `{key}:` must be a list of mappings")
    return items


def _claim(registry: sources.Registry, path: Path, claim: dict[str, Any]) -> dict[str, Any]:
    """A claim with an id and its source fact resolved into ``cite`` (or its ``unverified`` as the cite)."""
    where = f"{path}: claim {claim.get('id', claim.get('claim'))!r}"
    if not claim.get("id"):
        raise UserError(f"{where}: every claim needs an `id`")
    unknown = sorted(set(claim) - set(CLAIM_KEYS))
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; a claim has {', '.join(CLAIM_KEYS)}")
    if bool(claim.get("source")) == bool(claim.get("unverified")):
        raise UserError(
            f"{where}: give `source: <source id>#<fact key>` (the fact that states it) or `unverified:` "
            "(what would verify it), not both and not neither"
        )
    for ref in claim.get("related") or []:
        registry.fact(ref, f"{where}, related")
    if claim.get("source"):
        fact = registry.fact(claim["source"], where)
        claim["cite"] = fact.cite()
        if fact.unverified:
            claim["unverified"] = f"its source fact is unverified: {fact.unverified}"
    else:
        claim["cite"] = f"unverified: {claim['unverified']}"
    if "at_scale" in claim and not isinstance(claim["at_scale"], dict):
        raise UserError(f"{where}: `at_scale:` must be a mapping (platform, algorithm, ranks, ...)")
    return claim


def at_scale(papers: list[Paper]) -> list[dict[str, Any]]:
    """The claims a simulation speaks to, one flat record each: the claim's id, paper, source and cite, and its
    ``at_scale`` keys; ``where`` names the file for errors."""
    return [
        {
            "id": c["id"],
            "paper": p.title,
            "source": c.get("source"),
            "cite": c["cite"],
            "where": f"{p.path}: claim {c['id']!r}",
            **c["at_scale"],
        }
        for p in papers
        for c in p.claims
        if "at_scale" in c
    ]
