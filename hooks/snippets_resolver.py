"""Resolve a page's `--8<--` includes exactly as the site build does.

pymdownx.snippets, configured from mkdocs.yml, replaces every include line; the test
suite runs the result (tests/pages.py) and the recorded-outputs hook keys on it, so
both see what the reader sees.
"""

from __future__ import annotations

from pathlib import Path

import markdown
import yaml

ROOT = Path(__file__).resolve().parent.parent


class _ConfigLoader(yaml.SafeLoader):
    """Reads mkdocs.yml, keeping MkDocs' own tags (`!relative`, `!ENV`) as plain text."""


_ConfigLoader.add_multi_constructor("!", lambda loader, tag, node: f"{tag} {node.value}")


def mkdocs_config() -> dict:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_ConfigLoader)


def _snippets_config() -> dict:
    """pymdownx.snippets options exactly as mkdocs.yml sets them, paths made absolute."""
    for extension in mkdocs_config()["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            # mkdocs.yml says `base_path: !relative $config_dir`: the repository root.
            return {**extension["pymdownx.snippets"], "base_path": [str(ROOT)]}
    raise LookupError("mkdocs.yml does not enable pymdownx.snippets")


def resolve_includes(text: str) -> str:
    """The page's Markdown after pymdownx.snippets has replaced every `--8<--` line."""
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={"pymdownx.snippets": _snippets_config()},
    )
    lines = text.split("\n")
    for preprocessor in md.preprocessors:
        if preprocessor.__class__.__name__ == "SnippetPreprocessor":
            lines = preprocessor.run(lines)
    return "\n".join(lines)
