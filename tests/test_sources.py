"""The source registry: every shipped claim, baseline and platform number names a registered fact (or is marked
unverified or assumed), and every loader refuses a reference the registry does not hold, naming file and entry."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from scalerepro import papers, sources
from scalerepro.analysis.reproduce import load_cards
from scalerepro.baselines import NUMBERS as BASELINE_NUMBERS
from scalerepro.baselines import load_baselines
from scalerepro.errors import UserError
from scalerepro.sim import claims as at_scale
from scalerepro.sim import platforms
from tests.support import REPO

CONFIG = REPO / "config"
PAPERS = CONFIG / "papers"


def test_shipped_registry_gives_every_source_an_identifier_and_every_fact_a_place():
    registry = sources.load_registry(CONFIG / "sources.yaml")
    assert {"ying2018", "kumar2017", "cho2017"} <= {s for s, src in registry.sources.items() if src.kind == "primary"}
    for source in registry.sources.values():
        assert source.identifier, source.id
        assert source.held, source.id
        assert source.facts, source.id
        for fact in source.facts.values():
            assert fact.fact, fact.ref
            assert fact.where, fact.ref


def test_every_shipped_claim_names_a_registered_fact_and_where_or_is_unverified():
    registry = sources.load_registry(CONFIG / "sources.yaml")
    for paper in load_cards(PAPERS):
        assert paper.id in registry.sources
        for claim in paper.claims:
            if claim.get("source"):
                fact = registry.fact(claim["source"], claim["id"])
                assert claim["cite"] == fact.cite(), claim["id"]
            else:
                assert claim["unverified"].strip(), claim["id"]
                assert claim["cite"].startswith("unverified: ")
    for claim in at_scale.load_claims(PAPERS, platforms.load_platforms(CONFIG / "platforms.yaml")):
        assert registry.fact(claim["source"], claim["id"]).where


def test_the_attributions_a_reader_could_not_check_are_corrected_or_unverified():
    claims = {c["id"]: c for p in load_cards(PAPERS) for c in p.claims}
    assert claims["cho-scaling-95"]["source"] == "ibm-ddl-announcement#scaling-95"  # the announcement (Caffe)
    assert "Caffe" in claims["cho-scaling-95"]["claim"]
    for unverified in ("cho-accuracy", "kumar-accuracy", "ying-large-batch", "ying-distributed-bn"):
        assert claims[unverified].get("unverified"), unverified
        assert not claims[unverified].get("source"), unverified
    cited = " ".join(str(c.get("cite")) for c in claims.values())
    assert "sec. 4" not in cited  # a place in Ying et al. the project never held


def test_every_shipped_baseline_number_is_stated_by_a_fact_or_derived():
    frame = load_baselines(CONFIG / "baselines.yaml")
    raw = yaml.safe_load((CONFIG / "baselines.yaml").read_text())["baselines"]
    raw += [entry for paper in papers.load_papers(PAPERS) for entry in paper.baselines]
    for entry, cites in zip(raw, frame["cites"], strict=True):
        for field in BASELINE_NUMBERS:
            if entry.get(field) is not None:
                assert field in cites or field in (entry.get("derived") or {}), (entry["work"], field)


def test_every_shipped_platform_number_names_a_fact_or_an_assumption():
    for name, plat in platforms.load_platforms(CONFIG / "platforms.yaml").items():
        for key, text in plat.sources.items():
            assert text.startswith("assumed: ") or ", " in text, (name, key, text)


def copy_config(tmp_path: Path) -> Path:
    """The shipped config folder in ``tmp_path`` (the loaders find sources.yaml beside each file)."""
    return Path(shutil.copytree(CONFIG, tmp_path / "config"))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_paper_refuses_an_unknown_source_id_naming_file_claim_and_id(tmp_path):
    config = copy_config(tmp_path)
    edit(config / "papers" / "kumar2017.yaml", "source: kumar2017#result", "source: kumar2071#result")
    with pytest.raises(UserError) as err:
        load_cards(config / "papers")
    message = str(err.value)
    assert "kumar2017.yaml" in message
    assert "'kumar-48min'" in message
    assert "unknown source id 'kumar2071'" in message


def test_a_paper_refuses_an_unknown_fact_and_a_claim_without_source_or_unverified(tmp_path):
    config = copy_config(tmp_path)
    ying = config / "papers" / "ying2018.yaml"
    edit(ying, "    source: ying2018#result", "    source: ying2018#sec-4")
    with pytest.raises(UserError, match=r"ying2018.yaml: claim 'ying-time-to-accuracy': source 'ying2018' has no fact"):
        load_cards(config / "papers")
    edit(ying, "    source: ying2018#sec-4\n", "")
    with pytest.raises(UserError, match=r"'ying-time-to-accuracy'.*give `source:"):
        load_cards(config / "papers")


def test_baselines_loader_refuses_an_unknown_id_and_an_unsourced_number(tmp_path):
    config = copy_config(tmp_path)
    edit(config / "baselines.yaml", "top1: jia2018#others", "top1: jai2018#others")
    with pytest.raises(
        UserError, match=r"baselines\[1\] \(You et al. 2017\), stated.top1: unknown source id 'jai2018'"
    ):
        load_baselines(config / "baselines.yaml")
    edit(config / "baselines.yaml", "      top1: jai2018#others\n", "")
    with pytest.raises(UserError, match=r"\(You et al. 2017\): top1 = 0.754 names no source"):
        load_baselines(config / "baselines.yaml")


def test_platform_loader_refuses_an_unknown_fact_and_a_claim_an_unknown_platform(tmp_path):
    config = copy_config(tmp_path)
    edit(config / "platforms.yaml", "max_ranks: {from: cho2017#resnet50}", "max_ranks: {from: cho2017#resnet-50}")
    with pytest.raises(UserError, match=r"platform 'minsky-ddl', sources.max_ranks: source 'cho2017' has no fact"):
        platforms.load_platforms(config / "platforms.yaml")
    config = copy_config(tmp_path / "again")
    edit(config / "papers" / "kumar2017.yaml", "platform: kumar-minsky", "platform: kumar-minksy")
    with pytest.raises(
        UserError, match=r"kumar2017.yaml: claim 'kumar-48min', at_scale: platform 'kumar-minksy' is not"
    ):
        at_scale.load_claims(config / "papers", platforms.load_platforms(config / "platforms.yaml"))


def test_an_unverified_fact_makes_the_claim_resting_on_it_unverified(tmp_path):
    config = copy_config(tmp_path)
    edit(
        config / "sources.yaml",
        "        fact: 90 epochs of ResNet-50 on ImageNet-1k on 256 GPUs in 48 minutes\n        where: abstract\n",
        "        fact: 90 epochs of ResNet-50 on ImageNet-1k on 256 GPUs in 48 minutes\n        where: abstract\n"
        "        unverified: a copy of the abstract that loads\n",
    )
    claims = {c["id"]: c for p in load_cards(config / "papers") for c in p.claims}
    assert claims["kumar-48min"]["unverified"].startswith("its source fact is unverified")
    assert claims["kumar-48min"]["cite"] == "kumar2017, abstract (unverified)"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"s": {"title": "t", "identifier": "i", "kind": "tertiary", "held": "h", "facts": {"f": {}}}}, "kind"),
        (
            {"s": {"title": "t", "identifier": "i", "kind": "primary", "held": "h", "facts": {"f": {"fact": "x"}}}},
            "'where'",
        ),
        ({"s": {"title": "t", "kind": "primary", "held": "h", "facts": {}}}, "lacks 'identifier'"),
    ],
)
def test_a_bad_registry_entry_is_named(tmp_path, body, named):
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"sources": body}))
    with pytest.raises(UserError) as err:
        sources.load_registry(path)
    assert "source 's'" in str(err.value)
    assert named in str(err.value)


DOCUMENTS = [
    *sorted((REPO / "src" / "scalerepro" / "comm").glob("*.py")),
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((CONFIG / "presets").glob("*.yaml")),
]
FACT_REF = r"\b([a-z][a-z0-9.-]*[a-z0-9])#([a-z0-9][a-z0-9-]*)\b"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_fact_the_code_and_docs_cite_is_registered(path):
    """A `source#fact` in a docstring, a doc page or a preset names a fact the registry holds."""
    import re

    registry = sources.load_registry(CONFIG / "sources.yaml")
    for sid, key in re.findall(FACT_REF, path.read_text()):
        if not sid.endswith(".md"):  # a page's anchor (docs/x.md#section) is not a source reference
            registry.fact(f"{sid}#{key}", str(path))


def test_a_paper_file_whose_name_is_no_registered_source_is_named_with_its_id(tmp_path):
    config = copy_config(tmp_path)
    (config / "papers" / "ying2018.yaml").rename(config / "papers" / "ying2019.yaml")
    with pytest.raises(
        UserError, match=r"ying2019.yaml \(a paper's id is its source's id\): unknown source id 'ying2019'"
    ):
        papers.load_papers(config / "papers")


def test_a_claim_id_in_two_papers_a_missing_preset_and_a_stray_key_are_errors_naming_the_file(tmp_path):
    config = copy_config(tmp_path)
    edit(config / "papers" / "ying2018.yaml", "id: ying-throughput", "id: kumar-48min")
    with pytest.raises(UserError, match=r"ying2018.yaml: claim id 'kumar-48min' is used in .*kumar2017.yaml too"):
        papers.load_papers(config / "papers")
    config = copy_config(tmp_path / "preset")
    (config / "presets" / "cho2017.yaml").unlink()
    with pytest.raises(UserError, match=r"cho2017.yaml: preset '../presets/cho2017.yaml' is not a file"):
        papers.load_papers(config / "papers")
    config = copy_config(tmp_path / "stray")
    edit(config / "papers" / "cho2017.yaml", "    at_scale:", "    simulated: cho-scaling-95\n    at_scale:")
    with pytest.raises(UserError, match=r"cho2017.yaml: claim 'cho-scaling-95': unknown key 'simulated'"):
        papers.load_papers(config / "papers")


def test_an_at_scale_claim_naming_an_unknown_algorithm_is_named_with_its_file(tmp_path):
    config = copy_config(tmp_path)
    edit(config / "papers" / "kumar2017.yaml", "      algorithm: multicolor\n", "      algorithm: multicolour\n")
    with pytest.raises(
        UserError, match=r"kumar2017.yaml: claim 'kumar-48min', at_scale: algorithm 'multicolour' is not"
    ):
        at_scale.load_claims(config / "papers", platforms.load_platforms(config / "platforms.yaml"))
