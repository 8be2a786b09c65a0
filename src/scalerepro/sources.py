"""The registry of sources (config/sources.yaml): every source the project relies on, and its facts by key.

A claim, a published baseline or a platform number names the fact it rests
on as ``<source id>#<fact key>``; :meth:`Registry.fact` resolves that
reference or stops with a :class:`~scalerepro.errors.UserError` naming the
file and entry that made it, so nothing can cite a source the project has
not registered, or a place in it the project has not read. A fact the
project could not check carries ``unverified`` (what would verify it), and
whatever rests on it is reported as unverified too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalerepro.errors import UserError
from scalerepro.io import read_yaml

DEFAULT = Path("config/sources.yaml")
KINDS = ("primary", "secondary")
SOURCE_KEYS = {"title", "authors", "year", "identifier", "kind", "held", "read_at", "not_held", "facts"}
FACT_KEYS = {"fact", "where", "derived", "unverified"}


@dataclass(frozen=True)
class Fact:
    """One fact of a source: what it says (in this project's words), where, and how it was obtained."""

    source: str
    key: str
    fact: str
    where: str
    derived: str = ""  # the arithmetic, where the project computed the number from what the source states
    unverified: str = ""  # what would verify it, where the project could not

    @property
    def ref(self) -> str:
        """The reference other files use: ``source#key``."""
        return f"{self.source}#{self.key}"

    def cite(self) -> str:
        """``source, where`` (and ``unverified`` where it is)."""
        return f"{self.source}, {self.where}" + (" (unverified)" if self.unverified else "")


@dataclass(frozen=True)
class Source:
    """A registered source: title, identifier, primary or secondary, what of it is held, and its facts."""

    id: str
    title: str
    identifier: str
    kind: str
    held: str
    facts: dict[str, Fact] = field(default_factory=dict)
    not_held: str = ""
    read_at: tuple[str, ...] = ()


@dataclass(frozen=True)
class Registry:
    """Every source of one registry file, by id."""

    path: Path
    sources: dict[str, Source]

    def source(self, sid: str, where: str) -> Source:
        """The source ``sid``; an error naming ``where`` (file and entry) and the known ids otherwise."""
        if sid not in self.sources:
            raise UserError(
                f"{where}: unknown source id {sid!r}; register it in {self.path} "
                f"(known: {', '.join(sorted(self.sources))})"
            )
        return self.sources[sid]

    def fact(self, ref: Any, where: str) -> Fact:
        """The fact ``ref`` (``source#key``) names; errors name ``where``, the reference and the fix."""
        if not isinstance(ref, str) or ref.count("#") != 1:
            raise UserError(
                f"{where}: source reference {ref!r} must read <source id>#<fact key>, e.g. goyal2017#recipe"
            )
        sid, key = ref.split("#")
        source = self.source(sid, where)
        if key not in source.facts:
            raise UserError(
                f"{where}: source {sid!r} has no fact {key!r} in {self.path} (its facts: {', '.join(source.facts)})"
            )
        return source.facts[key]

    def facts(self, refs: Any, where: str) -> list[Fact]:
        """One reference or a list of them, resolved."""
        return [self.fact(r, where) for r in (refs if isinstance(refs, list) else [refs])]


def load_registry(path: Path) -> Registry:
    """The registry at ``path``; errors name the file, the source and the key."""
    doc = read_yaml(path, "sources")
    entries = doc.get("sources") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise UserError(f"{path}: expected a top-level 'sources:' mapping of id -> source")
    return Registry(path, {sid: _source(path, str(sid), body) for sid, body in entries.items()})


def _source(path: Path, sid: str, body: Any) -> Source:
    """One entry of the registry, checked."""
    where = f"{path}: source {sid!r}"
    if not isinstance(body, dict):
        raise UserError(f"{where} must be a mapping of keys")
    unknown = sorted(set(body) - SOURCE_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {unknown}; known: {sorted(SOURCE_KEYS)}")
    for key in ("title", "identifier", "kind", "held", "facts"):
        if not body.get(key):
            raise UserError(f"{where} lacks {key!r}")
    if body["kind"] not in KINDS:
        raise UserError(f"{where}: kind {body['kind']!r}; choose one of {', '.join(KINDS)}")
    if not isinstance(body["facts"], dict):
        raise UserError(f"{where}: facts must be a mapping of key -> {{fact, where}}")
    facts = {str(k): _fact(where, sid, str(k), v) for k, v in body["facts"].items()}
    return Source(
        sid,
        str(body["title"]),
        str(body["identifier"]),
        body["kind"],
        str(body["held"]),
        facts,
        str(body.get("not_held") or ""),
        tuple(str(u) for u in body.get("read_at") or ()),
    )


def _fact(where: str, sid: str, key: str, body: Any) -> Fact:
    """One fact of a source, checked: it says what and where."""
    if not isinstance(body, dict) or not body.get("fact") or not body.get("where"):
        raise UserError(f"{where}: fact {key!r} needs 'fact' (what the source states) and 'where' (the place in it)")
    unknown = sorted(set(body) - FACT_KEYS)
    if unknown:
        raise UserError(f"{where}: fact {key!r}: unknown key(s) {unknown}; known: {sorted(FACT_KEYS)}")
    return Fact(
        sid,
        key,
        " ".join(str(body["fact"]).split()),
        str(body["where"]),
        str(body.get("derived") or ""),
        str(body.get("unverified") or ""),
    )


def beside(path: Path, doc: dict[str, Any], default: str = DEFAULT.name) -> Path:
    """The registry a file refers to: its ``sources_file:``, else ``default``, both relative to its folder (the
    default: sources.yaml in it)."""
    return path.parent / str(doc.get("sources_file") or default)


def load_beside(path: Path, doc: dict[str, Any], default: str = DEFAULT.name) -> Registry:
    """The registry of the file at ``path`` whose parsed content is ``doc`` (see :func:`beside`); an error naming
    both if missing."""
    registry = beside(path, doc, default)
    if not registry.is_file():
        raise UserError(
            f"{path} cites registered sources but {registry} is missing; put the sources file beside it "
            "(config/sources.yaml ships with the project) or name one with a top-level `sources_file:`"
        )
    return load_registry(registry)


# Platform numbers and published figures: how an entry says where a number comes from.
def number_source(registry: Registry | None, entry: Any, where: str) -> str:
    """A number's source as one line, from ``{from: refs[, derived: how]}`` or ``{assumed: why}``; else an error.

    ``from`` names the registered facts the number is (or is computed from, ``derived``); ``assumed`` says
    why a number no source gives was chosen.
    """
    if isinstance(entry, dict) and entry.get("assumed") and not entry.get("from"):
        return f"assumed: {' '.join(str(entry['assumed']).split())}"
    if not isinstance(entry, dict) or not entry.get("from"):
        raise UserError(
            f"{where}: give {{from: <source id>#<fact key>}} (with derived: how, if computed) or {{assumed: why}}"
        )
    if registry is None:
        raise UserError(f"{where}: cites {entry['from']!r} but no sources file was found beside the file")
    facts = registry.facts(entry["from"], where)
    cited = "; ".join(f.cite() for f in facts)
    return f"{cited}: derived: {' '.join(str(entry['derived']).split())}" if entry.get("derived") else cited
