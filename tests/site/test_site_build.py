"""How the site is built: notebooks render with the outputs they carry (the suite executes
them: tests/site/); .py files stay code; the site serves the package's wheel, and every page
with code shows the lines that install it."""

from __future__ import annotations

import html
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from pages import fences, mkdocs_config, pages, resolve_includes

from conftest import ROOT, mkdocs_build

sys.path.insert(0, str(ROOT / "hooks"))


def notebook(source: str, printed: str = "") -> str:
    """A notebook of one code cell, which carries `printed` as its output."""
    outputs = [{"output_type": "stream", "name": "stdout", "text": printed}] if printed else []
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "metadata": {},
                    "outputs": outputs,
                    "source": source,
                }
            ],
            "metadata": {
                "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def site_with_notebook(tmp_path: Path, source: str, printed: str = "") -> Path:
    """A minimal site using our mkdocs-jupyter settings, with one notebook page."""
    ours = mkdocs_config()
    jupyter = next(p for p in ours["plugins"] if isinstance(p, dict) and "mkdocs-jupyter" in p)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    (tmp_path / "docs" / "lab.ipynb").write_text(notebook(source, printed))
    (tmp_path / "docs" / "helper.py").write_text("print('a script, not a page')\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump({"site_name": "t", "plugins": ["search", jupyter]}))
    return config


@pytest.mark.slow
def test_a_notebook_renders_its_outputs_unexecuted_and_py_files_are_not_pages(tmp_path):
    """The build shows the outputs a notebook carries and runs none of its cells: the
    topics' notebooks carry the suite's recordings, and the suite executes them."""
    config = site_with_notebook(tmp_path, "print(6 * 7)\n1 / 0", printed="42 from the run\n")
    result = mkdocs_build(tmp_path / "site", config)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "site" / "lab" / "index.html").read_text()
    assert "42 from the run" in page and "ZeroDivisionError" not in page
    assert not (tmp_path / "site" / "helper").exists()


@pytest.mark.slow
def test_notebook_pages_inline_a_fraction_of_jupyterlabs_stylesheet(built_site):
    """mkdocs-jupyter inlines JupyterLab's stylesheet and theme (some 585 KB) into every
    notebook page; hooks/notebook_css.py keeps what can style the page, a tenth or less (in
    Chromium, tests/site/test_browser.py checks that what it dropped styles nothing)."""
    import notebook_css

    whole = {name: len(text) for text, name in notebook_css.jupyterlab_css().items()}
    pages = sorted(built_site.site.glob("stage-*/notebooks/*/index.html"))
    assert pages
    for page in pages:
        styles = dict(
            re.findall(r'<style data-trimmed="([^"]+)">(.*?)</style>', page.read_text(), re.S)
        )
        assert sorted(styles) == ["index.css", "theme-light.css"], page
        kept = sum(len(css) for css in styles.values())
        assert 0 < kept <= sum(whole[name] for name in styles) / 10, (page, kept)
        assert all(text not in page.read_text() for text in notebook_css.jupyterlab_css()), page


def test_notebook_pages_show_the_sites_figures_and_their_downloads_carry_them(built_site):
    """A rendered notebook's figures are the site's files, fetched beside the page (no base64
    copy in its HTML), and each is there; the notebook its button downloads carries them."""
    pages = sorted(built_site.site.glob("stage-*/notebooks/*/index.html"))
    linked = 0
    for page in pages:
        shown = page.read_text()
        assert "data:image" not in shown, page
        for src in re.findall(r'<img [^>]*src="([^"]+)"', shown):
            assert (page.parent / src).resolve().is_file(), (page, src)
            linked += 1
        download = json.loads((page.parent / f"{page.parent.name}.ipynb").read_text())
        for cell in download["cells"]:
            for name in cell.get("attachments", {}):
                assert f"](attachment:{name})" in cell["source"], (page, name)
    assert linked >= 5  # the figures of the stage-7 and stage-8 notebooks, among others


def test_notebook_pages_define_the_copy_icon_once_and_every_button_uses_it(built_site):
    """mkdocs-jupyter's template draws a copy button per cell, each with the icon's paths;
    a notebook page holds those paths once, as the template writes them."""
    import notebook_css

    template = notebook_css.ASSETS.parent / "notebook.html.j2"
    icon = re.search(r'class="clipboard-copy-icon">(.*?)</svg>', template.read_text(), re.S)
    paths = re.findall(r"<path [^>]*\bd=\"([^\"]+)\"", icon[1])
    assert len(paths) == 2
    for page in sorted(built_site.site.glob("stage-*/notebooks/*/index.html")):
        shown = page.read_text()
        buttons = shown.count("<clipboard-copy ")
        assert buttons > 0 and shown.count('<use href="#clipboard-copy-icon-paths">') == buttons
        assert [shown.count(f'd="{d}"') for d in paths] == [1, 1], page


@pytest.mark.slow
def test_no_python_file_under_docs_becomes_a_page(built_site):
    for script in (ROOT / "docs").glob("**/*.py"):
        rel = script.relative_to(ROOT / "docs").with_suffix("")
        assert not (built_site.site / rel / "index.html").exists(), f"{script} became a page"


@pytest.mark.slow
def test_figures_are_drawn_at_build_time(built_site):
    for script in (ROOT / "docs").glob("**/figures/*.py"):
        svg = built_site.site / script.relative_to(ROOT / "docs").with_suffix(".svg")
        assert svg.is_file() and svg.read_text().lstrip().startswith("<?xml"), svg


def test_math_becomes_mathml():
    import mathml

    html = '<p>Bytes <span class="arithmatex">\\(2 \\times L\\)</span></p>'
    html += '<div class="arithmatex">\\[\\frac{a}{b}\\]</div>'
    out = mathml.on_page_content(html, None, None, None)
    assert "arithmatex" not in out and out.count("<math") == 2 and "<mfrac>" in out


@pytest.mark.slow
def test_no_page_is_left_with_unrendered_math(built_site):
    for page in built_site.site.glob("**/index.html"):
        assert 'class="arithmatex"' not in page.read_text(encoding="utf-8"), page


@pytest.mark.slow
def test_no_page_links_to_a_placeholder_address(built_site):
    """Canonical links come from site_url, which the deployment sets (SITE_URL); a local
    build points them at `nox -s serve`'s address, never at a made-up domain."""
    pages = sorted(built_site.site.rglob("*.html"))
    assert len(pages) > 24
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "example.org" not in html, page
    home = (built_site.site / "index.html").read_text(encoding="utf-8")
    assert '<link rel="canonical" href="http://127.0.0.1:8000/">' in home


def page_text(page: Path) -> str:
    """A built page as a reader reads it: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def built_page(built_site, source: Path) -> Path:
    rel = source.relative_to(ROOT / "docs").with_suffix("")
    return built_site.site / ("" if rel.name == "index" else rel) / "index.html"


@pytest.mark.slow
def test_the_site_serves_the_packages_wheel(built_site):
    from published_wheel import DOWNLOADS

    import llmserve_ref

    (wheel,) = (built_site.site / DOWNLOADS).glob("*.whl")
    version = llmserve_ref.__version__  # the release and this tree's content hash
    assert wheel.name == f"llmserve_ref-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "llmserve_ref/model/weights.py" in names
    assert "llmserve_ref/data/models/target/model.safetensors" in names


@pytest.mark.slow
def test_home_and_every_page_with_code_show_the_install_lines(built_site):
    from published_wheel import DOWNLOADS, install_lines, wheel_url

    (wheel,) = (built_site.site / DOWNLOADS).glob("*.whl")
    url = wheel_url("http://127.0.0.1:8000/", f"{DOWNLOADS}/{wheel.name}")  # site_url here
    lines = install_lines(url)
    home = ROOT / "docs" / "index.md"
    with_code = [p for p in pages() if fences(resolve_includes(p.read_text(encoding="utf-8")))]
    assert with_code, "no page has a Python block: fences() found none"
    for source in [home, *with_code]:
        text = page_text(built_page(built_site, source))
        for line in lines:
            assert line in text, f"{source.name} does not show {line!r}"
    # The README shows them with the version, which changes with every change to the
    # package, written as <version>.
    version = url.rsplit("/", 1)[1].split("-")[1]  # as the URL writes it: + is %2B
    shown = install_lines(url.replace(version, "<version>"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for line in shown:
        assert line in readme, f"README.md's 'Copy-run a snippet' must show {line!r}"


@pytest.mark.slow
def test_no_page_tells_a_reader_to_install_from_a_clone(built_site):
    for page in built_site.site.rglob("*.html"):
        assert "pip install -e" not in page_text(page), page
