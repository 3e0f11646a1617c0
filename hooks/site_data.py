"""MkDocs hook: data files the site's scripts read, generated from the package at build time.

The KV calculator (docs/javascripts/kv-calculator.js) reads the model and GPU catalog
from `javascripts/kv-catalog.json`, written here from `llmserve_ref.planning.model_catalog`, so the
page's calculator and the Python functions can never disagree about a model.
"""

from __future__ import annotations

from mkdocs.structure.files import File

from llmserve_ref.planning.model_catalog import catalog_as_json


def on_files(files, config):
    files.append(File.generated(config, "javascripts/kv-catalog.json", content=catalog_as_json()))
    return files
