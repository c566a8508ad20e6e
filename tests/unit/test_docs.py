"""The docs hold together: every relative Markdown link in README.md, docs/*.md and
docker/hadoop-cluster/README.md leads to a file or directory that exists (and, into a Markdown
page, to a heading that exists), and every benchmark (bench/<name>.py) and bench/results/<file>
they name exists. The docs' numbers come from those files; a renamed result, a benchmark that
never landed or a moved page must not leave a reader with a dead reference."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# [text](target) and ![alt](target), with an optional "title"; <target> for targets with spaces.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target (reference-style definitions)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
BENCH_FILE = re.compile(r"bench/(?:results/[A-Za-z0-9_.\-]+|[A-Za-z0-9_]+\.py)")
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)
IGNORED = re.compile(r"^(https?|mailto):", re.I)


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "docker" / "hadoop-cluster" / "README.md"]


def without_code(text: str) -> str:
    """The text with fenced code blocks and code spans blanked: `[a](b)` in code is not a link."""
    return CODE_SPAN.sub(" ", FENCE.sub("", text))


def link_targets(text: str) -> list[str]:
    prose = without_code(text)
    found = [m.group(1) for m in LINK.finditer(prose)] + [m.group(1) for m in REFERENCE.finditer(prose)]
    return [t[1:-1] if t.startswith("<") and t.endswith(">") else t for t in found]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    out: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        name, n = base, 0
        while name in out:  # GitHub numbers repeated headings: name, name-1, name-2, ...
            n += 1
            name = f"{base}-{n}"
        out.add(name)
    return out


def broken_links(doc: Path) -> list[str]:
    """'<doc>: <target>' for each relative link whose file (or anchor in a Markdown page) is missing."""
    problems = []
    for target in link_targets(doc.read_text(encoding="utf-8")):
        if IGNORED.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            problems.append(f"{doc.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            problems.append(f"{doc.name}: {target} (no such heading)")
    return problems


def missing_bench_files(doc: Path, root: Path = ROOT) -> list[str]:
    """'<doc>: bench/…' for each benchmark or results file the doc names that does not exist."""
    names = {m.group(0).rstrip(".") for m in BENCH_FILE.finditer(doc.read_text(encoding="utf-8"))}
    return [f"{doc.name}: {name}" for name in sorted(names) if not (root / name).exists()]


# ---- the repository's docs ---------------------------------------------------------------------
def test_the_docs_exist():
    assert all(doc.is_file() for doc in doc_files()), [str(d) for d in doc_files() if not d.is_file()]
    assert len(doc_files()) > 3


def test_every_relative_link_leads_somewhere():
    assert [p for doc in doc_files() for p in broken_links(doc)] == []


def test_every_benchmark_and_result_named_exists():
    assert [p for doc in doc_files() for p in missing_bench_files(doc)] == []


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {Path(t.partition("#")[0]).name for t in link_targets(readme) if t.startswith("docs/")}
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in linked) == []


# ---- the checks themselves can fail -------------------------------------------------------------
def _tree(tmp_path: Path, readme: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Two words\n\nSee [home](../README.md).\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "kept.json").write_text("{}")
    (tmp_path / "README.md").write_text(readme)
    return tmp_path / "README.md"


def test_a_missing_file_an_unknown_heading_and_a_missing_result_are_reported(tmp_path):
    doc = _tree(tmp_path, "[gone](docs/gone.md), [guide](docs/guide.md#three-words), ![plot](bench/results/x.png)\n"
                          "Numbers: `bench/results/kept.json`, bench/results/lost-2core.json, by bench/gone.py.\n"
                          "[ref]: docs/also-gone.md\n")
    assert broken_links(doc) == ["README.md: docs/gone.md (no such file)",
                                 "README.md: docs/guide.md#three-words (no such heading)",
                                 "README.md: bench/results/x.png (no such file)",
                                 "README.md: docs/also-gone.md (no such file)"]
    assert missing_bench_files(doc, tmp_path) == ["README.md: bench/gone.py", "README.md: bench/results/lost-2core.json",
                                                  "README.md: bench/results/x.png"]


def test_good_links_web_links_and_code_pass(tmp_path):
    doc = _tree(tmp_path, "# Top\n\n[guide](docs/guide.md#two-words), [dir](docs/), [here](#top), "
                          "[web](https://example.com/x.md), [mail](mailto:a@b.c), <https://example.com>\n"
                          "`[not](a-link.md)`\n\n```\n[not](a-link-either.md) bench/results/kept.json\n```\n")
    assert broken_links(doc) == []
    assert missing_bench_files(doc, tmp_path) == []


def test_anchors_follow_githubs_rules():
    text = "# TonY-py architecture\n## From the jar: `hadoop jar`, `java -cp`, Dataproc\n## Notes\n## Notes\n"
    assert anchors(text) == {"tony-py-architecture", "from-the-jar-hadoop-jar-java--cp-dataproc", "notes", "notes-1"}
    assert slug("Executor ↔ AM over HTTP, signed with a per-application secret") == \
        "executor--am-over-http-signed-with-a-per-application-secret"
    assert slug("The jar's driver runs the bundled Python client as a child process") == \
        "the-jars-driver-runs-the-bundled-python-client-as-a-child-process"


def test_the_decisions_page_lists_every_decision_in_its_contents():
    text = (ROOT / "docs" / "decisions.md").read_text()
    headings = [h[3:].strip() for h in text.splitlines() if h.startswith("## ") and h != "## Contents"]
    contents = text.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(.+)\]\(#([^)]+)\)$", contents, re.M)
    assert listed == [(h, slug(h)) for h in headings], "update the Contents list of docs/decisions.md"
