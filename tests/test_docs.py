"""The README and docs/ hold together: every Markdown link goes somewhere, every file or heading a
comment, a docstring or a page cites exists, the README stays a README, and the blocks of output
made from data alone are what their maker makes now (scripts/doc_blocks.py).

What counts as a citation (what a reader could follow and find missing):
- a Markdown link in README.md or a docs page: a relative file, with or without an anchor, or an
  anchor of the page itself; an anchor is a heading's GitHub slug;
- a path in a comment or docstring of repro/, probes/, proxies/, tests/, benchmarks/, scripts/, or
  in a page's text outside its fenced blocks, whose first folder is one of the repository's own (repro/io/tls.py,
  docs/watch.md#alerts; a name in capitals stands for any name, a star for anything), a bare page
  name ending in .md, or a path out of the repository (under the lead's shared folder, or up
  from the root: nobody who clones it has those);
- README or a docs page (or README's) followed by a quoted heading, in a comment or docstring.
Paths into other projects' sources (`vllm/...`, `python/sglang/...`) are not ours to check.
Plain file reads, no socket, no process: part of `make test-fast`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from scripts.doc_blocks import BLOCKS, block

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_DIRS = ("repro", "probes", "proxies", "tests", "benchmarks", "scripts")
OURS = {path.name for path in ROOT.iterdir() if path.is_dir() and not path.name.startswith(".")} - {"runs"}
OUTSIDE = ("shared", "..")

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.-])((?:\.\./)*[\w.-]+(?:/[\w.*-]+)*(?:\.(?:md|py|toml|ya?ml|json|jsonl|txt|html)|/)"
                  r"(?:#[\w-]+)?)(?![\w/])")
QUOTED_HEADING = re.compile(r"(README|docs/[\w-]+\.md)(?:\.md)?(?:'s)?,? \"([^\"]+)\"")
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(text: str) -> list[str]:
    """The Markdown headings of a page, outside fenced code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            found.append(match.group(1).strip())
    return found


def anchors(path: Path) -> set[str]:
    """Every anchor a page offers, a repeated heading's with GitHub's -1, -2 suffixes."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path.read_text()):
        base = slug(heading)
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


def broken_target(target: str, base: Path, page: Path) -> str | None:
    """Why `target` (a file relative to `base`, or the repository root, with an optional #anchor)
    leads nowhere; None when it resolves."""
    file, _, anchor = target.partition("#")
    if not file:
        resolved = page
    else:
        resolved = next((c for c in (base / file, ROOT / file) if c.exists()), None)
        pattern = PLACEHOLDER.sub("*", file)
        if resolved is None and "*" in pattern:  # a name in capitals, or a star: any name
            matches = [m for root in (base, ROOT) for m in root.glob(pattern)]
            return None if matches else f"{target}: no file matches {pattern}"
        if resolved is None:
            return f"{target}: no such file"
    if anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
        return f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}"
    return None


def cited_path_is_ours(path: str) -> bool:
    first = path.split("/")[0]
    return first in OURS or first in OUTSIDE or ("/" not in path.split("#")[0] and path.split("#")[0].endswith(".md"))


def path_faults(text: str, base: Path, page: Path) -> list[str]:
    """The paths `text` cites that lead nowhere (see the module's docstring for what is cited)."""
    faults = []
    for match in PATH.finditer(text):
        path = match.group(1)
        if not cited_path_is_ours(path):
            continue
        if path.split("/")[0] in OUTSIDE:
            faults.append(f"{path}: outside the repository: cite a docs page, or copy the fact into docs/")
        elif path.split("#")[0].endswith(".md") and "/" not in path.split("#")[0]:
            bare = path.split("#")[0]
            if not any((where / bare).exists() for where in (ROOT, ROOT / "docs")):
                faults.append(f"{path}: no such page (in the root or docs/)")
            elif "#" in path:
                home = ROOT / bare if (ROOT / bare).exists() else ROOT / "docs" / bare
                faults += [why for why in [broken_target(home.name + "#" + path.split("#")[1], home.parent, page)] if why]
        elif (why := broken_target(path, ROOT, page)) is not None:
            faults.append(why)
    for page_cited, heading in QUOTED_HEADING.findall(text):
        cited = ROOT / ("README.md" if page_cited == "README" else page_cited)
        if cited.exists() and slug(heading) not in anchors(cited):
            faults.append(f'{page_cited} "{heading}": no such heading in {cited.name} (cite the page that holds it)')
    return faults


def comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def prose(page: Path) -> str:
    """A page's text outside fenced blocks (those are output, not citations), its links left out
    (test_every_markdown_link_resolves follows them from the page's own folder)."""
    text, fenced, kept = page.read_text(), False, []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(LINK.sub(" ", line).replace("`", " "))
    return "\n".join(kept)


# --- the checks ---------------------------------------------------------------------------------

def test_every_markdown_link_resolves():
    faults = [f"{page.relative_to(ROOT)}: {why}" for page in PAGES for target in LINK.findall(page.read_text())
              if not re.match(r"[a-z]+:", target)
              if (why := broken_target(target, page.parent, page)) is not None]
    assert not faults, "\n".join(faults)


def test_every_path_a_comment_or_docstring_cites_exists():
    faults = []
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in comments_and_docstrings(path):
                faults += [f"{path.relative_to(ROOT)}:{line}: {why}" for why in path_faults(text, ROOT, path)]
    assert not faults, "\n".join(faults)


def test_every_path_a_page_cites_exists():
    faults = [f"{page.relative_to(ROOT)}: {why}" for page in PAGES
              for why in path_faults(prose(page), page.parent, page)]
    assert not faults, "\n".join(faults)


def test_the_readme_is_a_readme():
    """Under 220 lines, and it starts with the two commands that work on a fresh machine."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 220, f"README.md has {len(lines)} lines: move the detail into a docs/ page"
    fence = lines.index("```sh")
    commands = [line.split("#")[0].strip() for line in lines[fence + 1:lines.index("```", fence)]]
    assert lines[0] == "# repro" and fence == 2 and commands == ["make demo", "make test"], lines[:8]


def test_the_readmes_table_has_a_row_per_command():
    from repro.cli import COMMANDS

    rows = re.findall(r"^\| `repro (\w+)` \|", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert sorted(rows) == sorted(COMMANDS), f"README.md's commands table: rows {rows}, commands {list(COMMANDS)}"


def test_the_blocks_made_from_data_are_up_to_date():
    stale = [f"{file}: block {name} is out of date: python scripts/doc_blocks.py {name}"
             for name, (file, make, pure) in BLOCKS.items() if pure and block((ROOT / file).read_text(), name) != make()]
    assert not stale, "\n".join(stale)


# --- the checker finds what it should -----------------------------------------------------------

def test_the_checker_finds_a_broken_link_a_missing_heading_and_a_path_outside(tmp_path):
    page = ROOT / "docs" / "watch.md"
    assert broken_target("watch.md#alerts", page.parent, page) is None
    assert broken_target("#metrics", page.parent, page) is None
    assert broken_target("nope.md", page.parent, page) == "nope.md: no such file"
    assert "no heading #nope" in broken_target("watch.md#nope", page.parent, page)
    assert "no heading #alerts" in broken_target("../README.md#alerts", page.parent, page)
    code = ROOT / "repro" / "cli.py"
    said = path_faults('see DESIGN.md, shared/research/engines.md, repro/core/gone.py and README "Nowhere"; '
                       "vllm/v1/metrics/loggers.py is not ours; tests/fixtures/console/panels/panel-KIND.txt is",
                       ROOT, code)
    assert [why.split(":")[0] for why in said] == ["DESIGN.md", "shared/research/engines.md", "repro/core/gone.py",
                                                    'README "Nowhere"'], said
    assert path_faults("docs/verdicts.md#verdict-kinds and engines.md#the-routers-exposition", ROOT, code) == []
    assert path_faults('docs/watch.md "Alerts" and README "A verdict"', ROOT, code) == []
    assert path_faults('docs/watch.md "Nowhere"', ROOT, code) == [
        'docs/watch.md "Nowhere": no such heading in watch.md (cite the page that holds it)']
    assert path_faults("docs/verdicts.md#nope", ROOT, code) == ["docs/verdicts.md#nope: no heading #nope in docs/verdicts.md"]


def test_slugs_are_githubs():
    assert slug("Wire APIs: `--api chat|responses|messages`") == "wire-apis---api-chatresponsesmessages"
    assert slug("`repro report RUN_DIR`") == "repro-report-run_dir"
    assert slug("A sans-I/O core") == "a-sans-io-core"
    assert slug("The router's exposition") == "the-routers-exposition"
