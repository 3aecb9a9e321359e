"""The documentation stays true to the repository: the generated scenario reference matches the
code, every relative link in README.md and docs/*.md points at a file that exists (and, for a
Markdown target with a #fragment, at a heading that exists), and the README stays short."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import script_module

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _generator():
    return script_module("docs/gen_scenario_reference.py")


def _prose(text: str) -> str:
    """Markdown without fenced code blocks and code spans (links there are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_scenario_reference_is_current() -> None:
    """docs/scenario-reference.md is exactly what docs/gen_scenario_reference.py writes today."""
    committed = (DOCS / "scenario-reference.md").read_text(encoding="utf-8")
    assert _generator().render() == committed, (
        "docs/scenario-reference.md is out of date: run python docs/gen_scenario_reference.py")


def test_scenario_reference_covers_every_field() -> None:
    """Every field of the scenario and of the models under it has a row."""
    gen = _generator()
    text = gen.render()
    order, _ = gen.walk(gen.Scenario)
    assert order[0] is gen.Scenario and len(order) > 10
    for model in order:
        section = text.split(f"## {model.__name__}\n", 1)[1].split("\n## ", 1)[0]
        for name in model.model_fields:
            assert f"| `{name}` |" in section, f"{model.__name__}.{name} has no row"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link points at an existing file; a #fragment into Markdown at a heading."""
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto:, ...
            continue
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and unquote(fragment) not in _anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_links_are_found() -> None:
    """The link check sees the README's links to docs/ (guards against a regex that finds nothing)."""
    links = LINK.findall(_prose((ROOT / "README.md").read_text(encoding="utf-8")))
    assert "docs/quickstart.md" in links and "docs/index.md" in links


def test_readme_is_short() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size < 20_000, f"README.md is {size} bytes; move detail into docs/"


def test_readme_keeps_the_two_commands() -> None:
    """CI runs the README's test command; the two commands open the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text
    assert text.index("make run") < text.index("## Example")


def test_design_names_every_module() -> None:
    """docs/design.md's package layout lists every module of the simulator and of calibrate (by file
    name, under its package's folder line), so the map cannot fall behind the tree."""
    text = (ROOT / "docs" / "design.md").read_text()
    layout = text[text.index("## Package layout"):text.index("## Design rules")]
    missing = []
    for package in ("simulator", "calibrate"):
        for f in sorted((ROOT / package).rglob("*.py")):
            if f.name == "__init__.py" or "_compiled" in f.parts:
                continue
            folder = f.parent.relative_to(ROOT / package)
            named_folder = not folder.parts or f"{folder.parts[-1]}/" in layout
            if f.name not in layout and not (f.parent.name == "importers" and package == "calibrate"):
                missing.append(str(f.relative_to(ROOT)))
            elif not named_folder:
                missing.append(str(f.parent.relative_to(ROOT)) + "/")
    assert not missing, f"docs/design.md's layout does not name: {sorted(set(missing))}"
