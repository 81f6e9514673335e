"""`slipway upload | submit | schedule | schedules | unschedule` through the real kfp.Client against a loopback KFP API
server that checks every request and response against the published v2beta1 API (tests/support/kfp_server.py)."""

from __future__ import annotations

import json
import logging
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from kfp.client import Client

from slipway.cli import main
from slipway.delivery import commands, connection, remote
from slipway.delivery.cli import DEFAULT_PIPELINE
from slipway.delivery.cron import check_cron
from slipway.delivery.package import SAFE_LOADER, check_parameters, git_commit, parse_parameters, read_package
from tests.support import kfp_server
from tests.support.kfp_server import ApiViolation, Identity

ROOT = Path(__file__).resolve().parents[1]
TABULAR = ROOT / "pipelines" / "tabular_pipeline.yaml"
SHA = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "kfp-tok-3f9c1e-DO-NOT-PRINT-77aa"
REQUIRED = ["--param", "data=/data/taxi.csv", "--param", "label=big_tipper", "--param", "module_file=/m/taxi.py"]


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    for name in (connection.HOST_ENV, connection.UI_ENV, connection.TOKEN_ENV, connection.TOKEN_PATH_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_SHA", SHA)
    # kfp keeps a namespace in ~/.config/kfp/context.json; the projected token path may exist on a cluster node
    monkeypatch.setattr(Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    monkeypatch.setattr(connection, "PROJECTED_TOKEN", tmp_path / "no-projected-token")
    monkeypatch.setattr(commands, "POLL_FIRST_S", 0.001)


@pytest.fixture
def kfp():
    with kfp_server.running() as server:
        yield server


def run(server, *argv: str) -> int:
    return main([argv[0], "--host", server.url, *argv[1:]])


def one_error(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"stdout: {out!r}\nstderr: {err!r}"
    return lines[0]


def changed_copy(tmp_path: Path, description: str = "changed") -> Path:
    """The tabular pipeline with another description: different content, same pipeline."""
    spec, platform = yaml.load_all(TABULAR.read_text(), Loader=SAFE_LOADER)
    spec["pipelineInfo"]["description"] = description
    path = tmp_path / description / "tabular_pipeline.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.dump_all([spec, platform], Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                                 sort_keys=False))
    return path


def uploaded(server, capsys, path: Path = TABULAR, *extra: str) -> dict:
    assert run(server, "upload", *extra, str(path)) == 0
    capsys.readouterr()
    return max(server.fake.versions.values(), key=lambda v: v["created_at"])


def test_default_pipeline_is_the_tabular_one():
    assert read_package(TABULAR).name == DEFAULT_PIPELINE


def test_upload_new_identical_and_changed(kfp, capsys, tmp_path):
    digest = read_package(TABULAR).digest
    assert run(kfp, "upload", str(TABULAR)) == 0
    out = capsys.readouterr().out
    (pipeline,) = kfp.fake.pipelines.values()
    (version,) = kfp.fake.versions.values()
    assert pipeline["display_name"] == "slipway-tabular" and pipeline["namespace"] == ""
    # no --description: the pipeline's own, as the compiled YAML holds it (the UI's pipelines list shows it)
    description = next(yaml.safe_load_all(TABULAR.read_text()))["pipelineInfo"]["description"]
    assert description.startswith("CSV/Parquet to a blessed TensorFlow model")
    assert pipeline["description"] == version["description"] == description
    assert version["display_name"] == f"{SHA[:12]}-{digest}"
    spec, platform = yaml.load_all(TABULAR.read_text(), Loader=SAFE_LOADER)
    assert version["pipeline_spec"] == {"pipeline_spec": spec, "platform_spec": platform}
    assert f"uploaded version {SHA[:12]}-{digest}" in out
    assert f"{kfp.url}/#/pipelines/details/{pipeline['pipeline_id']}/version/{version['pipeline_version_id']}" in out

    uploads = len(kfp.bodies("UploadPipelineVersion"))
    assert run(kfp, "upload", str(TABULAR)) == 0
    assert "already holds this content; nothing uploaded" in capsys.readouterr().out
    assert len(kfp.fake.versions) == 1 and len(kfp.bodies("UploadPipelineVersion")) == uploads

    changed = changed_copy(tmp_path)
    assert run(kfp, "upload", "--description", "nightly build", str(changed)) == 0
    out = capsys.readouterr().out
    assert len(kfp.fake.versions) == 2 and len(kfp.fake.pipelines) == 1
    newest = max(kfp.fake.versions.values(), key=lambda v: v["created_at"])
    assert newest["display_name"] == f"{SHA[:12]}-{read_package(changed).digest}" != version["display_name"]
    assert newest["description"] == "nightly build"
    assert f"uploaded version {newest['display_name']}" in out

    # a version name already taken by other content: the server's 409, in one line
    assert run(kfp, "upload", "--version-name", newest["display_name"], str(changed_copy(tmp_path, "again"))) == 2
    line = one_error(capsys)
    assert line.startswith("error: cannot upload a version of pipeline slipway-tabular: 409") and \
        f"The name {newest['display_name']} already exist" in line


def test_upload_is_a_no_op_for_the_same_content_under_any_name(kfp, capsys, monkeypatch):
    uploaded(kfp, capsys, TABULAR, "--version-name", "hand-made")
    monkeypatch.setenv("GITHUB_SHA", "f" * 40)  # another commit, same bytes: found by the content hash
    assert run(kfp, "upload", str(TABULAR)) == 0
    assert "version hand-made" in capsys.readouterr().out  # found by comparing the stored spec
    assert len(kfp.fake.versions) == 1


def test_upload_rejects_what_is_not_a_compiled_pipeline(kfp, capsys, tmp_path):
    for name, text in (("values.yaml", "a: 1\n"), ("two.yaml", "a: 1\n---\nb: 2\n"), ("bad.yaml", "a: [\n")):
        (tmp_path / name).write_text(text)
        assert run(kfp, "upload", str(tmp_path / name)) == 2
        assert str(tmp_path / name) in one_error(capsys)
    assert run(kfp, "upload", str(tmp_path / "missing.yaml")) == 2
    assert "cannot read it" in one_error(capsys)
    assert kfp.requests == []


def test_submit_runs_the_newest_version_with_checked_parameters(kfp, capsys, tmp_path):
    first = uploaded(kfp, capsys)
    newest = uploaded(kfp, capsys, changed_copy(tmp_path))
    params = tmp_path / "params.yaml"
    params.write_text("label: big_tipper\nmodule_file: /m/taxi.py\nworkers: 1\ndeploy_cluster: {replicas: 2}\n")
    code = run(kfp, "submit", "--experiment", "nightly", "--params-file", str(params), "--param", "workers=3",
               "--param", "data=/data/taxi.csv", "--param", 'hyperparameters={"epochs": 2}',
               "--param", "allow_anomalies=true", "--run-name", "first try")
    assert code == 0
    out = capsys.readouterr().out
    (body,) = kfp.bodies("RunService_CreateRun")
    (experiment,) = kfp.fake.experiments.values()
    assert experiment["display_name"] == "nightly"
    assert body == {
        "display_name": "first try", "experiment_id": experiment["experiment_id"],
        "pipeline_version_reference": {"pipeline_id": newest["pipeline_id"],
                                       "pipeline_version_id": newest["pipeline_version_id"]},
        "runtime_config": {"parameters": {
            "label": "big_tipper", "module_file": "/m/taxi.py", "workers": 3, "data": "/data/taxi.csv",
            "deploy_cluster": '{"replicas": 2}', "hyperparameters": '{"epochs": 2}', "allow_anomalies": True}},
        "service_account": "slipway-pipeline"}
    (run_id,) = kfp.fake.runs
    assert f"{kfp.url}/#/runs/details/{run_id}" in out

    # --version picks an older one by name; the experiment is reused
    assert run(kfp, "submit", "--experiment", "nightly", "--version", first["display_name"], *REQUIRED,
               "--service-account", "team-runner") == 0
    body = kfp.bodies("RunService_CreateRun")[-1]
    assert body["pipeline_version_reference"]["pipeline_version_id"] == first["pipeline_version_id"]
    assert body["service_account"] == "team-runner"
    assert len(kfp.fake.experiments) == 1


def test_submit_wait_exits_0_on_success_and_1_on_failure(kfp, capsys):
    uploaded(kfp, capsys)
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED, "--wait") == 0
    out = capsys.readouterr().out
    assert [line.split(": ")[-1] for line in out.splitlines() if line.startswith("run ") and ": " in line][-3:] == \
        ["PENDING", "RUNNING", "SUCCEEDED"]

    kfp.fake.run_states = ["PENDING", "RUNNING", "FAILED"]
    kfp.fake.run_error = "task train failed: container exited 137 (OOMKilled)"
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED, "--wait", "--timeout", "60") == 1
    line = one_error(capsys)
    assert "FAILED" in line and "OOMKilled" in line

    kfp.fake.run_error, kfp.fake.failed_task = "", "ingest"  # a step failed: KFP 2.14 names it, with no error
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED, "--wait", "--timeout", "60") == 1
    line = one_error(capsys)
    assert re.search(r"FAILED: step ingest failed; its one-line error ends the step's log \(\[slipway\] ingest failed: "
                     r"\.\.\.\), on the run page's Logs tab: http://127\.0\.0\.1:\d+/#/runs/details/", line), line

    kfp.fake.run_states = ["PENDING", "RUNNING"]
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED, "--wait", "--timeout", "0.05") == 1
    assert "did not finish within --timeout" in one_error(capsys)


def test_terminate_stops_a_running_run_and_leaves_an_ended_one_alone(kfp, capsys):
    uploaded(kfp, capsys)
    kfp.fake.run_states = ["PENDING", "RUNNING"]  # never ends by itself
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED) == 0
    run_id = re.search(r"^run ([0-9a-f-]{36}) ", capsys.readouterr().out, re.MULTILINE).group(1)
    assert run(kfp, "terminate", run_id, "--wait", "--timeout", "60") == 0
    out = capsys.readouterr().out
    assert f"run {run_id}: termination requested" in out
    assert out.strip().splitlines()[-1] == f"run {run_id}: CANCELED"
    assert len(kfp.bodies("RunService_TerminateRun")) == 1
    # an ended run: nothing is sent, and the command says why
    assert run(kfp, "terminate", run_id) == 0
    assert capsys.readouterr().out.strip() == f"run {run_id} already ended (CANCELED): nothing to terminate"
    assert len(kfp.bodies("RunService_TerminateRun")) == 1
    assert run(kfp, "terminate", "0" * 8 + "-0000-0000-0000-" + "0" * 12) == 2
    assert "not found" in one_error(capsys).lower()
    assert run(kfp, "terminate", run_id, "--timeout", "5") == 2
    assert "--timeout 5: goes with --wait" in one_error(capsys)


def test_parameters_are_checked_before_anything_is_created(kfp, capsys):
    uploaded(kfp, capsys)
    before = len(kfp.requests)
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED, "--param", "epochs=3") == 2
    line = one_error(capsys)
    assert "unknown parameter epochs" in line and "valid: allow_anomalies, backend," in line and "workers" in line
    assert run(kfp, "submit", "--experiment", "e", *REQUIRED, "--param", "workers=two") == 2
    assert "workers is NUMBER_INTEGER" in one_error(capsys)
    assert run(kfp, "submit", "--experiment", "e", "--param", "data=/d.csv") == 2
    assert "needs parameter label, module_file" in one_error(capsys)
    assert run(kfp, "submit", "--experiment", "e", "--param", "oops") == 2
    assert "expected KEY=VALUE" in one_error(capsys)
    created = {"RunService_CreateRun", "ExperimentService_CreateExperiment"}
    assert not [r for r in kfp.requests[before:] if r["operation"] in created]


def test_schedule_notes_that_kfp_before_2_5_picks_the_newest_version_once(capsys):
    with kfp_server.running(tag_name="2.4.0") as server:
        version = uploaded(server, capsys)
        assert run(server, "schedule", "--experiment", "nightly", "--cron", "0 0 3 * * *", *REQUIRED) == 0
    out = capsys.readouterr().out
    assert f"note: KFP 2.4.0 picks the newest version once, now ({version['display_name']})" in out


def test_schedule_sends_a_cron_recurring_run_of_the_newest_version(kfp, capsys):
    version = uploaded(kfp, capsys)
    assert run(kfp, "schedule", "--experiment", "nightly", "--cron", "0 0 3 * * *", *REQUIRED) == 0
    out = capsys.readouterr().out
    (body,) = kfp.bodies("RecurringRunService_CreateRecurringRun")
    (experiment,) = kfp.fake.experiments.values()
    assert body["trigger"] == {"cron_schedule": {"cron": "0 0 3 * * *"}}
    assert int(body["max_concurrency"]) == 1 and body["no_catchup"] is True and body["mode"] == "ENABLE"
    assert body["pipeline_version_reference"] == {"pipeline_id": version["pipeline_id"]}  # the newest at run time
    assert body["experiment_id"] == experiment["experiment_id"] and body["display_name"] == "slipway-tabular"
    assert body["service_account"] == "slipway-pipeline"
    assert body["runtime_config"]["parameters"]["label"] == "big_tipper"
    (job,) = kfp.fake.recurring_runs.values()
    assert f"recurring run slipway-tabular ({job['recurring_run_id']})" in out
    assert "note:" not in out  # KFP 2.5 and later pick the newest version at each run (the fake is 2.14.3)

    assert run(kfp, "schedule", "--experiment", "nightly", "--cron", "@every 6h", "--name", "pinned", "--version",
               version["display_name"], "--max-concurrency", "3", "--catchup", *REQUIRED) == 0
    assert "note:" not in capsys.readouterr().out
    body = kfp.bodies("RecurringRunService_CreateRecurringRun")[-1]
    assert body["pipeline_version_reference"]["pipeline_version_id"] == version["pipeline_version_id"]
    assert int(body["max_concurrency"]) == 3 and body["no_catchup"] is False

    assert run(kfp, "schedule", "--experiment", "nightly", "--cron", "0 0 4 * * *", *REQUIRED) == 2
    assert "an enabled recurring run of that name exists" in one_error(capsys)


@pytest.mark.parametrize(("cron", "says"), [
    ("0 3 * * *", "found 5; KFP would read these 5 as second minute hour"),
    ("* * * *", "expected 6 fields"),
    ("0 0 3 * * * *", "found 7"),
    ("60 * * * * *", "second field '60': 60 is out of range 0-59"),
    ("0 0 25 * * *", "hour field '25'"),
    ("0 0 0 0 * *", "day-of-month field '0'"),
    ("0 0 0 * 13 *", "month field '13'"),
    ("0 0 0 * * 7", "day-of-week field '7'"),
    ("0 0 0 * foo *", "'foo' is not a number or a name (jan"),
    ("0 */0 * * * *", "step '0' must be a positive number"),
    ("0 5-2 * * * *", "range 5-2 runs backwards"),
    ("0 1,,2 * * * *", "empty item"),
    ("0 1-2-3 * * * *", "more than one '-'"),
    ("@every 0s", "shorter than 1 second"),
    ("@every 10x", "not a Go duration"),
    ("@every", "needs a duration"),
    ("@fortnightly", "unknown descriptor"),
])
def test_invalid_crons_are_refused_before_any_request(kfp, capsys, cron, says):
    assert run(kfp, "schedule", "--experiment", "e", "--cron", cron, *REQUIRED) == 2
    line = one_error(capsys)
    assert line.startswith(f"error: --cron {cron!r}: ") and says in line, line
    assert kfp.requests == []


@pytest.mark.parametrize("cron", ["0 0 3 * * *", "*/15 * * * * ?", "0 30 9 ? * MON-FRI", "0 0 12 1 jan,jul *",
                                  "0 0 9-17/2 * * 1-5", "5/10 * * * * *", "@every 1h30m", "@every 1.5h", "@hourly",
                                  "@midnight"])
def test_valid_crons_pass(cron):
    assert check_cron(f"  {cron} ") == " ".join(cron.split())


def test_max_concurrency_is_checked_locally(kfp, capsys):
    assert run(kfp, "schedule", "--experiment", "e", "--cron", "@daily", "--max-concurrency", "11", *REQUIRED) == 2
    assert "KFP accepts 1 to 10" in one_error(capsys)
    assert kfp.requests == []


def test_schedules_lists_and_unschedule_disables(kfp, capsys):
    version = uploaded(kfp, capsys)
    assert run(kfp, "schedules") == 0
    assert capsys.readouterr().out.strip() == "no recurring runs"
    assert run(kfp, "schedule", "--experiment", "nightly", "--cron", "0 0 3 * * *", *REQUIRED) == 0
    assert run(kfp, "schedule", "--experiment", "weekly", "--cron", "0 0 4 * * SUN", "--name", "pinned",
               "--version", version["display_name"], "--max-concurrency", "2", *REQUIRED) == 0
    capsys.readouterr()
    ids = {job["display_name"]: job["recurring_run_id"] for job in kfp.fake.recurring_runs.values()}
    assert run(kfp, "schedules") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "ID", "CRON", "STATUS", "PIPELINE/VERSION", "MAX", "CONCURRENCY"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["slipway-tabular"].split() == ["slipway-tabular", ids["slipway-tabular"], "0", "0", "3", "*", "*", "*",
                                               "enabled", "slipway-tabular/newest", "1"]
    assert f"slipway-tabular/{version['display_name']}" in rows["pinned"] and rows["pinned"].endswith(" 2")
    assert run(kfp, "schedules", "--experiment", "weekly") == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["pinned"]

    assert run(kfp, "unschedule", "slipway-tabular") == 0
    assert f"disabled recurring run slipway-tabular ({ids['slipway-tabular']})" in capsys.readouterr().out
    assert kfp.fake.recurring_runs[ids["slipway-tabular"]]["status"] == "DISABLED"
    assert run(kfp, "unschedule", ids["pinned"]) == 0  # by id
    assert kfp.fake.recurring_runs[ids["pinned"]]["status"] == "DISABLED"
    assert run(kfp, "unschedule", "slipway-tabular") == 0
    assert "already disabled" in capsys.readouterr().out
    assert run(kfp, "schedules") == 0
    assert capsys.readouterr().out.count(" disabled ") == 2
    assert run(kfp, "unschedule", "no-such-schedule") == 2
    assert "no-such-schedule: no recurring run of that name or id" in one_error(capsys)


def test_host_missing_or_unreachable_is_one_line(capsys):
    assert main(["upload", str(TABULAR)]) == 2
    assert "no KFP API address: pass --host URL or set $KF_PIPELINES_ENDPOINT" in one_error(capsys)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for argv in (["upload", str(TABULAR)], ["schedules"], ["unschedule", "x"]):
        assert main([*argv, "--host", f"http://127.0.0.1:{port}", "--namespace", "team-a"]) == 2
        line = one_error(capsys)
        assert f"--host http://127.0.0.1:{port}: cannot reach the KFP API server (Connection refused)" in line


def multi_user(**identities: Identity):
    return kfp_server.running(identities={TOKEN: Identity("alice", {"team-a": "edit"}), **identities},
                               multi_user=True)


def test_not_authenticated_is_one_line(capsys, tmp_path, monkeypatch):
    with multi_user() as kfp:
        assert run(kfp, "upload", "--namespace", "team-a", str(TABULAR)) == 2
        assert one_error(capsys) == ("error: not authenticated: pass a token (--token-file FILE, $SLIPWAY_KFP_TOKEN "
                                     "or $KF_PIPELINES_SA_TOKEN_PATH)")
        token_file = tmp_path / "token"
        token_file.write_text("expired-token\n")
        assert run(kfp, "schedules", "--token-file", str(token_file)) == 2
        assert f"rejected the token from --token-file {token_file}" in one_error(capsys)
        monkeypatch.setenv(connection.TOKEN_ENV, TOKEN)  # the right one
        assert run(kfp, "upload", "--namespace", "team-a", str(TABULAR)) == 0
        assert {r["authorization"] for r in kfp.requests if r["operation"] == "UploadPipelineVersion"} == \
            {f"Bearer {TOKEN}"}


def test_permission_denied_names_the_namespace_and_action(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(connection.TOKEN_ENV, TOKEN)
    with multi_user(viewer=Identity("bob", {"team-a": "view"})) as kfp:
        assert run(kfp, "upload", "--namespace", "team-b", str(TABULAR)) == 2
        line = one_error(capsys)
        assert line.startswith("error: permission denied: cannot list pipelines in namespace team-b (User 'alice'")
        assert run(kfp, "upload", "--namespace", "team-a", str(TABULAR)) == 0
        capsys.readouterr()
        monkeypatch.setenv(connection.TOKEN_ENV, "viewer")
        # a new version: the upload endpoint answers 400 with the PermissionDenied text (pipeline_upload_server.go)
        assert run(kfp, "upload", "--namespace", "team-a", str(changed_copy(tmp_path))) == 2
        assert one_error(capsys).startswith("error: permission denied: cannot upload a version of pipeline "
                                            "slipway-tabular in namespace team-a")
        assert run(kfp, "upload", "--namespace", "team-a", "--name", "other", str(TABULAR)) == 2
        assert one_error(capsys).startswith("error: permission denied: cannot create pipeline other in namespace "
                                            "team-a")
        assert run(kfp, "submit", "--namespace", "team-a", "--experiment", "e", *REQUIRED) == 2
        assert one_error(capsys).startswith("error: permission denied: cannot create an experiment in namespace "
                                            "team-a")


def test_pipeline_names_are_per_namespace_and_a_hidden_holder_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv(connection.TOKEN_ENV, TOKEN)
    with multi_user(both=Identity("carol", {"team-a": "edit", "team-b": "edit"})) as kfp:
        monkeypatch.setenv(connection.TOKEN_ENV, "both")
        assert run(kfp, "upload", "--namespace", "team-a", str(TABULAR)) == 0
        assert run(kfp, "upload", "--namespace", "team-b", str(TABULAR)) == 0  # KFP 2.x: unique per namespace
        assert sorted(p["namespace"] for p in kfp.fake.pipelines.values()) == ["team-a", "team-b"]
        capsys.readouterr()
        # a pipeline the server does not list (not READY) still holds its name: creating it answers 409
        kfp.fake.add_pipeline("half-deleted", "team-a", status="DELETING")
        assert run(kfp, "upload", "--namespace", "team-a", "--name", "half-deleted", str(TABULAR)) == 2
        line = one_error(capsys)
        assert "--name half-deleted: the server says a pipeline of that name exists in namespace team-a" in line


def test_a_concurrent_upload_of_the_same_name_becomes_a_version(kfp, capsys, monkeypatch):
    find = remote.find_pipeline

    def raced(session, name):  # another uploader creates the pipeline right after our lookup
        if not kfp.fake.pipelines:
            kfp.fake.add_pipeline(name)
            return None
        return find(session, name)

    monkeypatch.setattr(remote, "find_pipeline", raced)
    assert run(kfp, "upload", str(TABULAR)) == 0
    assert len(kfp.fake.pipelines) == 1 and len(kfp.fake.versions) == 1
    assert [r["operation"] for r in kfp.requests].count("PipelineService_CreatePipeline") == 1  # answered 409


def test_a_version_of_a_deleted_pipeline_is_one_line(kfp, capsys):
    version = uploaded(kfp, capsys)
    assert run(kfp, "submit", "--experiment", "e", "--version", "nope", *REQUIRED) == 2
    assert one_error(capsys).startswith(f"error: --version nope: pipeline 'slipway-tabular' has no version of that "
                                        f"name or id (newest: {version['display_name']})")
    kfp.fake.delete_pipeline(version["pipeline_id"])
    for command in (["submit"], ["schedule", "--cron", "@daily"]):
        assert run(kfp, *command, "--experiment", "e", "--version", version["display_name"], *REQUIRED) == 2
        assert one_error(capsys) == ("error: pipeline 'slipway-tabular' not found in the shared namespace: it was "
                                     "deleted or never uploaded (slipway upload PIPELINE.yaml)")
    assert not kfp.bodies("RunService_CreateRun") and not kfp.bodies("RecurringRunService_CreateRecurringRun")


def test_the_token_appears_in_no_output_or_log(capsys, caplog, tmp_path, monkeypatch):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kfp_server_api.rest")  # logs response bodies, which name the "user"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # the server names the user in its messages: here the user is the token itself, so redaction is tested too
    with multi_user(**{TOKEN: Identity(TOKEN, {"team-a": "edit"})}) as kfp, \
            kfp_server.running(identities={}, multi_user=True) as refusing:
        monkeypatch.setattr(commands, "POLL_FIRST_S", 0.001)
        for source in ({"env": TOKEN}, {"file": token_file}):
            monkeypatch.delenv(connection.TOKEN_ENV, raising=False)
            flags = ["--token-file", str(source["file"])] if "file" in source else []
            if "env" in source:
                monkeypatch.setenv(connection.TOKEN_ENV, TOKEN)
            kfp.fake.run_states, kfp.fake.run_error = ["FAILED"], f"failed with {TOKEN}"
            attempts = [
                ["upload", "--host", closed, *flags, str(TABULAR)],
                ["upload", "--host", refusing.url, *flags, "--namespace", "team-a", str(TABULAR)],
                ["upload", "--host", kfp.url, *flags, "--namespace", "team-b", str(TABULAR)],
                ["upload", "--host", kfp.url, *flags, "--namespace", "team-a", str(TABULAR)],
                ["submit", "--host", kfp.url, *flags, "--namespace", "team-a", "--experiment", "e", "--param", "x=1"],
                ["submit", "--host", kfp.url, *flags, "--namespace", "team-a", "--experiment", "e", *REQUIRED,
                 "--wait"],
                ["submit", "--host", kfp.url, *flags, "--namespace", "team-b", "--experiment", "e", *REQUIRED],
                ["schedule", "--host", kfp.url, *flags, "--experiment", "e", "--cron", "0 3 * * *"],
                ["schedules", "--host", kfp.url, *flags, "--namespace", "team-b"],
                ["unschedule", "--host", kfp.url, *flags, "--namespace", "team-a", "missing"],
            ]
            codes = [main(argv) for argv in attempts]
            assert codes[3] == 0 and all(code != 0 for i, code in enumerate(codes) if i != 3), codes
            out, err = capsys.readouterr()
            assert TOKEN not in out + err, (out + err)
            assert "***" in err  # the server's message named the "user"
        assert {r["authorization"] for r in kfp.requests} == {f"Bearer {TOKEN}"}
    assert any("***" in record.getMessage() for record in caplog.records)
    for record in caplog.records:
        assert TOKEN not in record.getMessage() and TOKEN not in (record.exc_text or "")
    with connection.open_session(kfp.url, "team-a", str(token_file)) as session:
        assert TOKEN not in repr(session) and TOKEN not in repr(session.credentials)


def test_a_rotated_token_file_is_read_again(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    credentials = connection.resolve_credentials(str(token_file))
    hook = connection._FileToken(credentials)

    class Config:
        api_key: dict = {}

    hook.refresh_api_key_hook(Config)
    assert Config.api_key["authorization"] == "first"
    token_file.write_text("second\n")
    hook.refresh_api_key_hook(Config)
    assert Config.api_key["authorization"] == "second"
    token_file.unlink()  # mid-rotation: the last good token stays
    hook.refresh_api_key_hook(Config)
    assert Config.api_key["authorization"] == "second"


def test_token_sources_in_order(tmp_path, monkeypatch):
    assert connection.resolve_credentials(None) is None
    path_file = tmp_path / "sa-token"
    path_file.write_text("from-path")
    monkeypatch.setenv(connection.TOKEN_PATH_ENV, str(path_file))
    assert connection.resolve_credentials(None).token == "from-path"
    monkeypatch.setenv(connection.TOKEN_ENV, "from-env")
    assert connection.resolve_credentials(None).token == "from-env"
    flag_file = tmp_path / "flag-token"
    flag_file.write_text("from-flag\n")
    assert connection.resolve_credentials(str(flag_file)).token == "from-flag"
    flag_file.write_text("  \n")
    with pytest.raises(connection.SlipwayError, match="the token file is empty"):
        connection.resolve_credentials(str(flag_file))


def test_version_names_and_parameters(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_SHA")
    assert git_commit(tmp_path) == "nogit"
    assert len(git_commit(ROOT)) in (12, 5)  # a checkout, or "nogit" in an exported tree
    declared = read_package(TABULAR).spec["root"]["inputDefinitions"]["parameters"]
    values = parse_parameters(["data=/d.csv", "label=y", "module_file=/m.py", "workers=4", "splits=train:4,eval:1",
                               "model_name=123", "keep_serving=false"], None)
    assert check_parameters(values, declared, "p") == {
        "data": "/d.csv", "label": "y", "module_file": "/m.py", "workers": 4, "splits": "train:4,eval:1",
        "model_name": "123", "keep_serving": False}
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"workers": "4"}))
    with pytest.raises(connection.SlipwayError, match="workers is NUMBER_INTEGER"):
        check_parameters({**values, **parse_parameters([], str(params))}, declared, "p")


def test_the_fake_server_fails_the_test_on_a_request_outside_the_api():
    with pytest.raises(ApiViolation, match="bogus"), kfp_server.running() as server:
        request = urllib.request.Request(f"{server.url}/apis/v2beta1/runs", method="POST",
                                         data=json.dumps({"display_name": 5, "bogus": 1}).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=10)
        assert answer.value.code == 400
        assert json.loads(answer.value.read())["code"] == 3
