"""What `nox -s mutation` reports: which functions mutmut leaves alone, and each survivor's
line in the source, found from mutmut's diff of the function (which starts at the function,
or at the comments above it, and shows a method dedented)."""

from __future__ import annotations

from score import skipped_functions, survivor

SOURCE = """import triton


@triton.jit
def kernel(x):
    return x


class Pool:
    @property
    def size(self):
        return 1

    @staticmethod
    def make():
        return Pool()

    # the only mutated method here
    def grow(self, x):
        y = x + 1
        return y
"""


def test_decorated_functions_but_static_and_class_methods_are_left_alone():
    assert skipped_functions(SOURCE) == ["kernel (@triton.jit)", "Pool.size (@property)"]


def test_a_survivor_is_placed_on_its_line_of_the_source():
    diff = "\n".join(
        [
            "--- a.py",
            "+++ a.py",
            "@@ -1,4 +1,4 @@",
            " # the only mutated method here",
            " def grow(self, x):",
            "-    y = x + 1",
            "+    y = x - 1",
            "     return y",
        ]
    )
    found = survivor(diff, SOURCE, "grow", "Pool")
    assert (found.line, found.code, found.mutated) == (20, "y = x + 1", "y = x - 1")
    assert SOURCE.splitlines()[found.line - 1].strip() == found.code
