"""A page's prose as Jupyter Markdown (hooks/notebook_markdown.py), construct by construct."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))

import notebook_markdown as md  # noqa: E402

SITE = md.Site("https://example.test/site/", "stage-2/attention.md", lambda path: "<svg/>")


def markdown_cells(text: str) -> list[str]:
    return [piece[1] for piece in md.cells(text, SITE) if piece[0] == "markdown"]


def test_an_admonition_becomes_a_block_quote_under_its_title():
    (cell,) = markdown_cells('!!! note "Units"\n\n    A KiB is 1024 bytes.\n')
    assert cell == "> **Units**\n>\n> A KiB is 1024 bytes."


def test_a_solution_is_collapsed_and_a_block_in_it_splits_it():
    block = md.PLACEHOLDER.format(0)
    pieces = md.cells(f'??? success "Solution"\n    Four.\n\n    {block}\n\n    So.\n', SITE)
    kinds = [piece[0] for piece in pieces]
    assert kinds == ["markdown", "block", "markdown"]
    assert pieces[0][1].startswith("<details><summary>Solution</summary>\n\nFour.")
    assert pieces[0][1].endswith("</details>")
    assert any(c.mark == "???" for c in pieces[1][2])  # the block knows it is in a solution
    assert pieces[2][1].startswith("<details><summary>Solution (continued)</summary>")


def test_links_to_pages_and_anchors_become_the_sites_addresses():
    (cell,) = markdown_cells(
        "See [streaming](../stage-6/streaming.md#stop-strings), [above](#queries) and "
        "[vLLM](https://docs.vllm.ai/)."
    )
    assert "[streaming](https://example.test/site/stage-6/streaming/#stop-strings)" in cell
    assert "[above](https://example.test/site/stage-2/attention/#queries)" in cell
    assert "[vLLM](https://docs.vllm.ai/)" in cell


def test_a_figure_is_attached_and_code_is_left_alone():
    pieces = md.cells("![Heads](figures/heads.svg)\n\n```text\n[x](y.md) costs $5\n```\n", SITE)
    (_, source, attachments) = pieces[0]
    assert source.startswith("![Heads](attachment:heads.svg)")
    assert set(attachments) == {"heads.svg"}
    assert "[x](y.md) costs $5" in source


def test_a_price_is_not_math_and_math_becomes_mathml_for_the_site():
    (cell,) = markdown_cells("A GPU-hour at $2.50 and $3 a day; $T$ rows.\n")
    assert cell == r"A GPU-hour at \$2.50 and \$3 a day; $T$ rows."
    shown = md.with_mathml(cell)
    assert shown.count("<math") == 1 and r"\$2.50" in shown


def test_a_widget_becomes_a_link_to_it_on_the_page():
    text = '<div id="calc" class="calc">\n<form>\n<input id="a">\n</form>\n</div>\n\nAfter.\n'
    (cell,) = markdown_cells(text)
    assert "[use it on the page](https://example.test/site/stage-2/attention/#calc)" in cell
    assert "<form" not in cell and "After." in cell


def test_the_suites_directives_do_not_show():
    assert markdown_cells('Before.\n\n<!-- skip: next "Needs CUDA" -->\n\nAfter.\n') == [
        "Before.\n\n\nAfter."
    ]
