"""Citation hygiene (issue 33 #4): the tree cites the public hardware documents as ``[TAG: section
or table]`` (docs/citations.md), never the line numbers of the project's private text copies of
them, never the section numbers of its private notes on them (the "digests") except through a
project id that docs/citations.md resolves, and never a design card that is not in the
repository."""
import re
from pathlib import Path

import pytest

from accelstub.devices.description import load_description

ROOT = Path(__file__).resolve().parent.parent
CITATIONS = ROOT / "docs" / "citations.md"
TAGS = ("UG-CNN", "U85-TRM", "NE16", "AI8X", "NVDLA-CONV")
SCANNED = ("api", "stub", "devices", "tui", "emu", "configs", "testkit", "tests", "docs",
           "benchmarks")
SUFFIXES = {".py", ".toml", ".md", ".cfg", ".tcss", ".txt", ".yaml", ".yml"}

#: what a citation of a seed by line number looks like; each names the form it catches
SEED_LINE_CITATIONS = {
    "seed-prefixed line (S0:L4192)": re.compile(r"\bS[0-4]:L\d"),
    "seed by number (seed 001)": re.compile(r"\b[Ss]eed 00[0-4]\b"),
    "seed file (001_f249....txt)": re.compile(r"\b00[0-4]_[0-9a-f]{16}\.txt"),
    "seeds folder (shared/seeds)": re.compile(r"shared/seeds"),
    "line number (L1234)": re.compile(r"\bL\d{3,5}\b"),
    "line range (L17-829)": re.compile(r"\bL\d{1,5}[-\u2013]L?\d"),
    "short line in parentheses ((L94))": re.compile(r"\(L(?:[2-9]|\d\d)\)|\(L\d\d, L\d"),
    "line-number convention (\"Lnnnn\")": re.compile(r"\bLn{3,4}\b"),
}
#: what a reference into the digests (shared/devices/*.md) looks like; each names the form
DIGEST_REFERENCES = {
    "digest file (shared/devices/ne16.md)": re.compile(
        r"shared/devices/|\b(?:max78000-registers|max78000-ai8x|ethos-u85-registers"
        r"|ethos-u85-command-stream)\.md|(?<![\w/])(?:ne16|nvdla)\.md"),
    "digest section or item (digest 3.5, digest \u00a77 #10, digest G-E3)": re.compile(
        r"\b[Dd]igest(?:'s)?(?: (?:registers|ai8x|gap))?(?: sections?)? (?:\u00a7?\d|G-|[AET]\d)"),
    "ai8x digest item (A\u00a77 A3)": re.compile(r"\bA\u00a77 [AE]\d"),
}
#: a project id: a decision, section, fact or worked example of the digests, resolved in
#: docs/citations.md ("R7#4", "A7#A3", "U8#18", "N8#13", "V8#7", "G-E3", "N§3.5", "C9#57")
PROJECT_ID = re.compile(r"(?<![\w-])(?:[RAUNVC]\d+#[AET]?\d+|G-[A-Z]\d+"
                        r"|[RAUCNV]\u00a7\d+(?:\.\d+)*)(?![\w.]*\d)")
DESIGN_CARD = re.compile(r"DESIGN\.md")
DOC_CITATION = re.compile(r"\[(" + "|".join(map(re.escape, TAGS)) + r")(?:: ([^\]]+))?\]")


def tree_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in SCANNED:
        files += [p for p in sorted((ROOT / top).rglob("*"))
                  if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts]
    here = Path(__file__).resolve()
    return [p for p in files if p.resolve() not in (here, CITATIONS.resolve())]


def hits(pattern: re.Pattern) -> list[str]:
    out = []
    for path in tree_files():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    return out


@pytest.mark.parametrize("form", sorted(SEED_LINE_CITATIONS))
def test_no_file_cites_a_seed_by_line_number(form):
    found = hits(SEED_LINE_CITATIONS[form])
    assert not found, (f"{len(found)} citation(s) of the {form} form; cite the public document "
                       "as [TAG: section or table] (docs/citations.md):\n" + "\n".join(found[:40]))


@pytest.mark.parametrize("form", sorted(DIGEST_REFERENCES))
def test_no_file_cites_a_digest_by_its_own_numbering(form):
    found = hits(DIGEST_REFERENCES[form])
    assert not found, (f"{len(found)} reference(s) of the {form} form; cite the public document "
                       "([TAG: section or table]) or a project id listed in docs/citations.md:\n"
                       + "\n".join(found[:40]))


def test_every_project_id_is_listed_in_citations_md():
    listed = CITATIONS.read_text(encoding="utf-8")
    missing = sorted({f"{m.group(0)} ({path.relative_to(ROOT)})" for path in tree_files()
                      for m in PROJECT_ID.finditer(path.read_text(encoding="utf-8"))
                      if f"| {m.group(0)} |" not in listed})
    assert not missing, "project ids not in docs/citations.md:\n" + "\n".join(missing)


def test_no_file_points_into_the_design_card():
    """The design card (../shared/DESIGN.md) is not in the repository: point to
    docs/design-notes.md or to the code that states the rule."""
    found = hits(DESIGN_CARD)
    assert not found, "\n".join(found)


def test_every_document_citation_is_listed_in_citations_md():
    listed = CITATIONS.read_text(encoding="utf-8")
    missing = set()
    for path in tree_files():
        for m in DOC_CITATION.finditer(path.read_text(encoding="utf-8")):
            for label in (m.group(2) or "").split(", "):
                if label == "...":  # '"[U85-TRM: ...]" cites ...' explains the form
                    continue
                row = f"`[{m.group(1)}: {label}]`" if label else f"## `{m.group(1)}`"
                if row not in listed:
                    missing.add(f"{row} ({path.relative_to(ROOT)})")
    assert not missing, "not in docs/citations.md:\n" + "\n".join(sorted(missing))


def test_citations_md_names_the_public_document_of_every_tag_it_lists():
    text = CITATIONS.read_text(encoding="utf-8")
    for tag in re.findall(r"^\| `\[([A-Z0-9-]+): ", text, re.M):
        assert f"## `{tag}`: " in text, tag


@pytest.mark.parametrize("device", sorted(p.stem for p in (ROOT / "configs").glob("*.toml")))
def test_users_never_see_a_document_citation(device):
    """The citations (document brackets and project ids) stay in configs/*.toml; what users see
    (SVD, describe, the TUI, gdb's target description) is the text without them."""
    desc = load_description(device)
    shown = [(r.name, r.doc) for r in desc.registers]
    shown += [(f"{r.name}.{f.name}", f.doc) for r in desc.registers for f in r.fields]
    leaked = [(name, doc) for name, doc in shown
              if DOC_CITATION.search(doc) or PROJECT_ID.search(doc)]
    assert not leaked, leaked[:10]
