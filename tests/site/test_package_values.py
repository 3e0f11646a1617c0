"""hooks/package_values.py: a package value written into the prose at build time."""

from __future__ import annotations

import doctest

import package_values
import pytest
from package_values import substitute

from llmserve_ref.planning.published import VLLM


def test_its_docstring_example_runs():
    assert doctest.testmod(package_values).failed == 0


def test_a_value_with_a_format_spec_and_one_without():
    text = "default {{ llmserve_ref.planning.published.VLLM.gpu_memory_utilization }}, or "
    text += "{{ llmserve_ref.planning.published.VLLM.gpu_memory_utilization | .0% }}"
    share = VLLM.gpu_memory_utilization
    assert substitute(text) == f"default {share}, or {share:.0%}" and "%" not in str(share)


def test_marking_shows_what_came_from_the_package():
    marked = substitute("{{ llmserve_ref.planning.published.VLLM.version }}", mark="<{}>".format)
    assert marked == f"<{VLLM.version}>"


@pytest.mark.parametrize(
    "name", ["llmserve_ref.planning.published.VLLM.nope", "llmserve_ref.nowhere.X"]
)
def test_a_name_the_package_does_not_have_is_an_error_that_names_it(name):
    with pytest.raises(LookupError, match=name.split(".")[-1]):
        substitute("{{ " + name + " }}")


def test_text_without_a_value_is_left_alone():
    text = "f'{{x}}' and {{ not_the_package.X }} stay as they are"
    assert substitute(text) == text
