"""The README and the guides in docs/ stay usable as they change.

- every relative link of README.md and docs/*.md leads somewhere: the file (or folder) exists,
  and a `#anchor` is the GitHub slug of one of the target file's headings;
- README.md is a front door, at most MAX_README_LINES lines;
- every key the pipelines file's parser accepts, of a pipeline and of its sink, is in the
  configuration reference's tables (the parser's own sets of keys, not a copy of them).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from onceflow.config.pipeline_table import _KEYS as PIPELINE_KEYS
from onceflow.config.sink_table import _SINK_KEYS as SINK_KEYS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
MAX_README_LINES = 350

FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the text may wrap over lines
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def prose(text: str, inline_code: bool = False) -> str:
    """Markdown without its code blocks, which hold no headings or links; without its inline
    code too unless `inline_code` (a heading's text keeps it)."""
    text = FENCE.sub("", text)
    return text if inline_code else INLINE_CODE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links as their text, no emphasis or code
    marks), lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of `path`, a repeated heading's as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for m in HEADING.finditer(prose(path.read_text(), inline_code=True)):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(prose(path.read_text()))]


def test_slug_is_githubs():
    assert slug("A worked example: `inventory`") == "a-worked-example-inventory"
    assert slug("When the transform's output changes") == "when-the-transforms-output-changes"
    assert slug("Small batches: Spark Connect") == "small-batches-spark-connect"
    assert slug("Issue 26: small batches and the 10M backlog, in both process modes") == (
        "issue-26-small-batches-and-the-10m-backlog-in-both-process-modes"
    )
    assert slug("The log is the ledger's") == "the-log-is-the-ledgers"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path):
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: {path.relative_to(ROOT)} has no heading #{anchor}")
    assert broken == []


def test_the_documents_link_to_each_other():
    """The link checker sees links at all: the README reaches every guide."""
    targets = {t.partition("#")[0] for t in links(ROOT / "README.md")}
    guides = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert guides - targets == set()


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines, at most {MAX_README_LINES}: move the detail into "
        "a guide in docs/ and link to it"
    )


def documented_keys(section: str) -> set[str]:
    """The keys in the first column of the tables under the `## section` heading of the
    configuration reference (a cell may name several: `driver_memory`, `executor_memory`)."""
    text = CONFIGURATION.read_text()
    m = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"{CONFIGURATION.relative_to(ROOT)} has no section '## {section}'"
    keys = set()
    for row in re.finditer(r"^\|([^|\n]*)\|", m.group(1), re.M):
        keys |= set(re.findall(r"`([^`]+)`", row.group(1)))
    return keys


@pytest.mark.parametrize(
    ("section", "accepted"),
    [("Pipelines", PIPELINE_KEYS), ("Sinks", SINK_KEYS)],
    ids=["pipeline", "sink"],
)
def test_every_accepted_key_is_documented(section: str, accepted: set[str]):
    undocumented = sorted(set(accepted) - documented_keys(section))
    assert undocumented == [], (
        f"keys the parser accepts but docs/configuration.md's '{section}' table does not "
        f"describe: {undocumented}"
    )
