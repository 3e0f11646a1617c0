"""The GitHub Actions workflows a fork runs: valid, and running what the project's CI runs.

They cannot run here (no GitHub runner), so what can be checked is checked: each file
against GitHub's workflow schema (check-jsonschema ships it: the check works offline),
and what the jobs run against the README and .ci/run. The negative test shows the schema
check can fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def schema_check(*files: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema"]
    command += ["vendor.github-workflows", *map(str, files)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def steps(workflow: dict, job: str) -> list[str]:
    return [step.get("run", step.get("uses", "")) for step in workflow["jobs"][job]["steps"]]


def load(name: str) -> dict:
    # YAML 1.1 reads the key `on` as True; GitHub reads it as "on".
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8"))


def test_every_workflow_validates_against_githubs_schema():
    assert [w.name for w in WORKFLOWS] == ["docs.yml", "tests.yml"]
    result = schema_check(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_fails_on_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  a:\n    steps:\n      - run: true\n")
    result = schema_check(broken)  # a job without runs-on
    assert result.returncode != 0 and "runs-on" in result.stdout


def test_the_linux_job_runs_the_projects_ci_and_the_others_the_test_sessions():
    tests = load("tests.yml")
    assert "bash .ci/run" in steps(tests, "linux-cpu")
    assert tests["jobs"]["linux-cpu"]["container"] == "debian:12"  # stock: PEP 668, chromium
    assert "nox -s \"tests(device='mps')\"" in steps(tests, "macos-mps")
    assert "nox -s \"tests(device='cpu')\"" in steps(tests, "macos-mps")
    cuda = tests["jobs"]["cuda"]
    assert "gpu" in cuda["runs-on"] and "inputs.cuda" in cuda["if"]  # off unless asked
    assert "nox -s \"tests(device='cuda')\" -- --force-device" in steps(tests, "cuda")


def readme_command(session: str) -> str:
    """The README's command for `session`, found by .ci/run's own `readme_command`."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    function = ci[
        ci.index("readme_command() {") : ci.index("\n}\n", ci.index("readme_command() {")) + 3
    ]
    found = subprocess.run(
        ["bash", "-c", f"{function}\nreadme_command {session}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


@pytest.mark.parametrize("session", ["tests", "serve"])
def test_ci_runs_the_readmes_commands_which_work_under_pep_668(session):
    command = readme_command(session)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"$ {command}   # " in readme  # the line as the README shows it, word for word
    # A stock Debian or Homebrew Python refuses pip outside a virtual environment (PEP 668):
    # the command makes one first and installs nox into it.
    assert command.startswith("python3 -m venv .venv && .venv/bin/python -m pip install nox && ")
    assert command.endswith(f".venv/bin/nox -s {session}")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"$(readme_command {session})" in ci


def test_mutation_testing_has_a_job_of_its_own_and_stays_out_of_ci_run():
    """`nox -s mutation` takes about 40 minutes on two cores: .ci/run's budget has no room."""
    assert steps(load("tests.yml"), "mutation")[-1] == "nox -s mutation"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line for line in ci if not line.lstrip().startswith("#")]
    assert not [line for line in commands if "mutation" in line]
    assert any("nox -s mutation" in line for line in ci)  # its comment says where it runs


def test_the_docs_workflow_builds_strict_and_deploys_with_the_pages_address():
    docs = load("docs.yml")
    build = docs["jobs"]["build"]
    assert "nox -s docs" in steps(docs, "build")
    site_url = next(s["env"]["SITE_URL"] for s in build["steps"] if s.get("run") == "nox -s docs")
    assert site_url == "${{ steps.pages.outputs.base_url }}/"
    assert any(s.startswith("actions/deploy-pages@") for s in steps(docs, "deploy"))
    assert docs["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}


@pytest.mark.parametrize("site_url", ["https://someone.github.io/llmserve/", None])
def test_site_url_comes_from_the_deployment(monkeypatch, site_url):
    from mkdocs.config import load_config

    if site_url is None:
        monkeypatch.delenv("SITE_URL", raising=False)
    else:
        monkeypatch.setenv("SITE_URL", site_url)
    config = load_config(str(ROOT / "mkdocs.yml"))
    assert config["site_url"] == (site_url or "http://127.0.0.1:8000/")


# The newest major of each action the workflows use (each action's releases, read when this
# was written): no workflow may fall behind them.
ACTIONS = {
    "actions/checkout": 5,
    "actions/setup-python": 6,
    "actions/setup-node": 5,
    "actions/configure-pages": 5,
    "actions/upload-pages-artifact": 4,
    "actions/deploy-pages": 4,
}
# Node's newest LTS line when this was written: 26 ("Lithium", LTS since 2026-10-28).
NODE_LTS = 26


def every_step(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_every_action_is_at_its_current_major_at_least():
    used = [s["uses"] for w in WORKFLOWS for s in every_step(load(w.name)) if "uses" in s]
    assert used
    for action, version in (use.split("@") for use in used):
        assert action in ACTIONS, f"{action}: add it to ACTIONS with its current major"
        assert int(version.removeprefix("v")) >= ACTIONS[action], f"{action}@{version}"


def test_every_node_is_the_newest_lts_line():
    setups = [s for w in WORKFLOWS for s in every_step(load(w.name))]
    versions = {s["with"]["node-version"] for s in setups if "setup-node" in s.get("uses", "")}
    assert versions == {str(NODE_LTS)}  # one line everywhere; LTS lines are even
    assert NODE_LTS % 2 == 0


def test_the_site_is_published_only_after_the_tests_pass_on_main():
    docs, tests = load("docs.yml"), load("tests.yml")
    trigger = docs[True]  # `on`, as YAML 1.1 reads it
    assert list(trigger) == ["workflow_run"]  # no push, no manual run around the tests
    assert trigger["workflow_run"] == {
        "workflows": [tests["name"]],
        "types": ["completed"],
        "branches": ["main"],
    }
    build = docs["jobs"]["build"]
    assert "github.event.workflow_run.conclusion == 'success'" in build["if"]
    assert "github.event.workflow_run.event == 'push'" in build["if"]
    checkout = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["ref"] == "${{ github.event.workflow_run.head_sha }}"
    assert docs["jobs"]["deploy"]["needs"] == "build"


def python_of(workflow: dict, job: str) -> str:
    (setup,) = [
        s
        for s in workflow["jobs"][job]["steps"]
        if s.get("uses", "").startswith("actions/setup-python")
    ]
    return str(setup["with"]["python-version"])


def test_the_newest_python_and_the_oldest_and_newest_torch_have_jobs():
    tests = load("tests.yml")
    assert python_of(tests, "python-newest") == "3.15"  # where the sessions take torch 2.15.0
    assert "nox -s \"tests(device='cpu')\"" in steps(tests, "python-newest")
    # torch 2.5.0, the floor, has wheels up to Python 3.12, and torch 2.15.0 from 3.11
    assert python_of(tests, "torch-range") in {"3.11", "3.12"}
    assert steps(tests, "torch-range")[-2:] == [
        "nox -s \"torch_range(torch='floor')\"",
        "nox -s \"torch_range(torch='newest')\"",
    ]
