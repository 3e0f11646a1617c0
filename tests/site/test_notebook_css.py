"""hooks/notebook_css.py on small stylesheets: what it keeps and what it drops. (In Chromium,
on the built notebook pages: tests/site/test_browser.py.)"""

from __future__ import annotations

import doctest
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))

import notebook_css
from notebook_css import trim


def test_its_examples():
    assert doctest.testmod(notebook_css).failed == 0


def test_a_rule_keeps_the_selectors_that_can_match():
    css = ".w .a,.w .gone{color:red}.w .gone{color:blue}"
    assert trim(css, '<div class="w"><p class="a">') == ".w .a{color:red;}"


def test_a_class_a_script_adds_is_kept():
    css = ".w .scrollwrap{overflow:auto}"
    assert trim(css, '<div class="w">') == ""
    assert trim(css, '<div class="w">', elsewhere='el.className = "scrollwrap"') == css[:-1] + ";}"


def test_functional_pseudo_classes_and_attributes_need_nothing():
    css = ".a:not(.gone) [x=y]:is(.other, .more){color:red}"
    assert trim(css, '<p class="a">') == css[:-1] + ";}"


def test_media_blocks_are_trimmed_inside_and_other_at_rules_kept_whole():
    css = "@media (max-width: 5px){.a{x:1}.gone{y:2}}@media print{.gone{z:3}}@keyframes k{to{x:1}}"
    assert trim(css, '<p class="a">') == "@media (max-width: 5px){.a{x:1;}}@keyframes k{to{x:1}}"


def test_a_custom_property_is_kept_while_something_reads_it():
    css = ".a{--unread:1;--size:var(--base);--base:2px;font-size:var(--size)}"
    assert trim(css, '<p class="a">') == ".a{--size:var(--base);--base:2px;font-size:var(--size);}"
    css = ".a{--theme:1;--other:2}"
    assert trim(css, '<p class="a">', elsewhere="x{color:var(--theme)}") == ".a{--theme:1;}"
    assert trim(css, '<p class="a" style="width: var(--other)">') == ".a{--other:2;}"
