"""The first code cells of every notebook (hooks/notebooks.py): what the pages need set.

The test sessions run a page with `LLMSERVE_DEVICE` set, Triton's interpreter on a CPU, and
the Python prompt's way of showing a value; a reader's Jupyter has none of it. These cells set
it, in the notebook itself, where the reader sees and can change it:

- `SETUP`: the device (`LLMSERVE_DEVICE`, else the best one present), `TRITON_INTERPRET=1`
  on a CPU, and values shown as repr() shows them (as doctest compares them), a cell of one
  statement showing every value in it, as the prompt does;
- `EVENT_LOOP`: `asyncio.run()`, which the package's clients and servers call, working
  inside Jupyter, whose own event loop runs while a cell does;
- `FAILED_CHECK`: a failed `assert` says where the page's numbers were measured, since a
  timing's margins hold on the machine that recorded it and may not on the reader's.
"""

SETUP = """\
import ast
import os

from llmserve_ref.device import best_device

# The device the examples run on: LLMSERVE_DEVICE ("cpu", "mps" or "cuda") if you set it,
# else the best one here. Without a GPU, Triton's kernels run in its interpreter.
os.environ.setdefault("LLMSERVE_DEVICE", best_device())
if os.environ["LLMSERVE_DEVICE"] == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
print("LLMSERVE_DEVICE =", os.environ["LLMSERVE_DEVICE"])


# A cell shows values as the Python prompt shows a `>>>` example of the page: as repr()
# writes them, and for a cell of one statement, also those of a loop's expressions.
def show_values_as_the_prompt_does(cell):
    try:
        one_statement = len(ast.parse(cell.raw_cell).body) == 1
    except SyntaxError:  # IPython's own commands, such as %run
        one_statement = False
    get_ipython().ast_node_interactivity = "all" if one_statement else "last_expr"


get_ipython().display_formatter.formatters["text/plain"].pprint = False
get_ipython().events.register("pre_run_cell", show_values_as_the_prompt_does)"""

# Jupyter runs an event loop of its own while a cell runs, where asyncio.run() refuses to
# start another: the package's clients and servers call it, so it runs them in a thread.
EVENT_LOOP = """\
import asyncio
import threading

run_outside_jupyter = asyncio.run


def run_beside_jupyters_loop(main, **options):
    \"\"\"asyncio.run, on a thread of its own where Jupyter's event loop is running.\"\"\"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_outside_jupyter(main, **options)
    outcome = {}

    def run():
        try:
            outcome["value"] = run_outside_jupyter(main, **options)
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


asyncio.run = run_beside_jupyters_loop"""

# An assertion that fails says where the page's numbers come from.
FAILED_CHECK = """\
from IPython import get_ipython

RECORDED_ON = {machine!r}


def explain_a_failed_check(shell, etype, value, tb, tb_offset=None):
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    print(
        "A check failed. If it checks a measurement (a time, a rate, a speed-up), the "
        f"page's numbers came from another machine ({{RECORDED_ON}}): its margins may not "
        "hold on yours, or under other load. Run the cell again, and compare your numbers "
        "with the recorded ones."
    )


get_ipython().set_custom_exc((AssertionError,), explain_a_failed_check)"""
