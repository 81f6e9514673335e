"""Rendered Katib Experiments are what the API server (Katib's OpenAPI schema, strict) and Katib's admission webhook
accept, their MPIJob trials what the MPIJob CRD accepts; Katib's substitution yields a valid trainer command; the
launcher-driven run returns the result schema or fails loudly."""

import argparse
import copy
import io
import json
import shlex
from pathlib import Path

import pytest
import yaml

import slipway  # noqa: F401
from slipway.components.tune import cluster as cluster_backend
from slipway.components.tune import katib
from slipway.components.tune.katib import TrialSettings, render_experiment
from slipway.components.tune.katib_admission import admission_errors
from slipway.core.errors import SlipwayError
from slipway.core.kube import launcher, upstream
from slipway.core.training import mpijob, mpijob_checks
from slipway.core.training.mpijob import ObjectStore, Pvc
from slipway.render import add_render_parser, crd_validator, run_render
from tests.support.fake_apiserver import FakeApiServer

REPO_ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "objective": {"type": "maximize", "goal": 0.95, "objectiveMetricName": "val_accuracy",
                  "additionalMetricNames": ["val_loss"]},
    "algorithm": {"algorithmName": "tpe"},
    "earlyStopping": {"algorithmName": "medianstop",
                      "algorithmSettings": [{"name": "min_trials_required", "value": "3"}]},
    "maxTrialCount": 6,
    "parallelTrialCount": 2,
    "maxFailedTrialCount": 2,
    "parameters": [
        {"name": "learning_rate", "parameterType": "double",
         "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}},
        {"name": "hidden_units", "parameterType": "int", "feasibleSpace": {"min": "16", "max": "128", "step": "16"}},
        {"name": "batch_size", "parameterType": "discrete", "feasibleSpace": {"list": ["32", "64"]}},
        {"name": "optimizer", "parameterType": "categorical", "feasibleSpace": {"list": ["adam", "sgd"]}},
    ],
}
SAMPLE = {"learningRate": "0.0123", "hiddenUnits": "48", "batchSize": "64", "optimizer": "sgd",
          "trialName": "tune-abc-x7k2m9qp"}
S3 = TrialSettings(
    transformed_examples="s3://ml/run-1/transform/transformed_examples",
    transform_graph="s3://ml/run-1/transform/transform_graph", module_file="/opt/slipway/pipelines/modules/taxi.py",
    hyperparameters={"epochs": 3, "learning_rate": 0.5}, storage=ObjectStore("minio-creds", "http://minio:9000"),
    tensorboard_dir="s3://ml/run-1/tune/tensorboard", run_id="run-1", task="tune",
)
PVC = TrialSettings(
    transformed_examples="/data/run-1/transformed_examples", transform_graph="/data/run-1/transform_graph",
    module_file="/data/run-1/module.py", workers=3, storage=Pvc("shared-data"), run_id="run-1", task="tune",
)


@pytest.fixture(scope="module")
def katib_validator():
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    document = json.loads(upstream.path("katib-openapi").read_text())

    def strict(node):  # unknown fields are errors (kubectl --validate=strict), except where the schema allows them
        if isinstance(node, dict):
            out = {k: strict(v) for k, v in node.items()}
            if "properties" in node and "additionalProperties" not in node:
                out["additionalProperties"] = False
            return out
        if isinstance(node, list):
            return [strict(v) for v in node]
        return node

    document["components"] = strict(document["components"])
    registry = Registry().with_resource("urn:katib", Resource.from_contents(document, DRAFT202012))
    schema = {"$ref": "urn:katib#/components/schemas/v1beta1.Experiment"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


@pytest.fixture(scope="module")
def mpijob_validator():
    return crd_validator(upstream.path("mpijob-crd"), "v2beta1")


def schema_errors(validator, obj) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def name() -> str:
    return katib.experiment_name("run-1")


def hyperparameters_after_substitution(experiment, values=SAMPLE) -> dict:
    trial_spec = katib.substitute(experiment, values)
    if trial_spec["kind"] == "Job":
        container = trial_spec["spec"]["template"]["spec"]["containers"][0]
    else:
        container = trial_spec["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["sh", "-c"] and len(container["command"]) == 3
    argv = shlex.split(container["command"][2])
    return json.loads(argv[argv.index("--hyperparameters") + 1]), argv


# --- rendered objects are accepted ----------------------------------------------------------------------------------


def test_job_trial_with_object_store_is_valid_for_katib(katib_validator):
    exp = render_experiment(SPEC, name(), "ml", S3)
    assert schema_errors(katib_validator, exp) == []
    assert admission_errors(exp) == []
    template = exp["spec"]["trialTemplate"]
    assert template["primaryContainerName"] == "training"
    assert template["successCondition"] == 'status.conditions.#(type=="Complete")#|#(status=="True")#'
    assert template["failureCondition"] == 'status.conditions.#(type=="Failed")#|#(status=="True")#'
    job = template["trialSpec"]
    assert (job["apiVersion"], job["kind"], job["spec"]["backoffLimit"]) == ("batch/v1", "Job", 0)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and [c["name"] for c in pod["containers"]] == ["training"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    env = pod["containers"][0]["env"]
    secret_refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert secret_refs == {k: {"name": "minio-creds", "key": k} for k in mpijob.CREDENTIAL_VARS}
    assert not any(e["name"] in mpijob.CREDENTIAL_VARS and "value" in e for e in env)
    assert exp["spec"]["resumePolicy"] == "Never"
    assert exp["spec"]["metricsCollectorSpec"]["collector"] == {"kind": "StdOut"}
    assert exp["metadata"]["labels"] == launcher.owner_labels("run-1", "tune")
    # the search spec is copied 1:1
    for key in ("objective", "algorithm", "earlyStopping", "maxTrialCount", "parallelTrialCount",
                "maxFailedTrialCount"):
        assert exp["spec"][key] == {**SPEC, "objective": exp["spec"]["objective"]}[key]
    assert [p["name"] for p in exp["spec"]["parameters"]] == [p["name"] for p in SPEC["parameters"]]


def test_mpijob_trial_with_pvc_is_valid_for_katib_and_the_mpijob_crd(katib_validator, mpijob_validator):
    exp = render_experiment(SPEC, name(), "ml", PVC)
    assert schema_errors(katib_validator, exp) == []
    assert admission_errors(exp) == []
    template = exp["spec"]["trialTemplate"]
    assert template["primaryContainerName"] == "mpi-launcher"
    assert template["primaryPodLabels"] == {"training.kubeflow.org/job-role": "launcher"}
    assert template["successCondition"] == 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    assert template["failureCondition"] == 'status.conditions.#(type=="Failed")#|#(status=="True")#'
    trial = template["trialSpec"]
    assert "name" not in trial.get("metadata", {}) and "namespace" not in trial.get("metadata", {})
    assert trial["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert trial["spec"]["runPolicy"]["backoffLimit"] == 0
    # as the trial controller creates it: substituted, with the trial's name and namespace
    job = katib.substitute(exp, SAMPLE)
    job["metadata"] = {**job.get("metadata", {}), "name": SAMPLE["trialName"], "namespace": "ml"}
    assert schema_errors(mpijob_validator, job) == []
    assert mpijob_checks.operator_errors(job) == []
    pods = [r["template"]["spec"] for r in job["spec"]["mpiReplicaSpecs"].values()]
    assert all(p["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "shared-data"}}]
               for p in pods)


@pytest.mark.parametrize("trial", [S3, PVC], ids=["job", "mpijob"])
def test_substituted_hyperparameters_are_json_with_the_right_types(trial):
    exp = render_experiment(SPEC, name(), "ml", trial)
    hparams, argv = hyperparameters_after_substitution(exp)
    assert hparams["learning_rate"] == 0.0123 and isinstance(hparams["learning_rate"], float)
    assert hparams["hidden_units"] == 48 and isinstance(hparams["hidden_units"], int)
    assert hparams["batch_size"] == 64 and hparams["optimizer"] == "sgd"
    assert hparams.get("epochs", 3) == 3  # base values stay; the tuned learning_rate overrides the base 0.5
    assert argv[argv.index("--no-export") - 1] != "--no-export" and "--no-export" in argv
    assert "python" in argv and argv[argv.index("python") + 2] == "slipway.components.train.distributed"
    # the trial names declared are exactly the ones used, and each references a search parameter or the trial name
    declared = {p["name"]: p["reference"] for p in exp["spec"]["trialTemplate"]["trialParameters"]}
    assert set(declared) == set(SAMPLE) - ({"trialName"} if not trial.tensorboard_dir else set())
    if trial.tensorboard_dir:
        assert declared["trialName"] == "${trialSpec.Name}"
        assert argv[argv.index("--tensorboard-dir") + 1] == f"{trial.tensorboard_dir}/{SAMPLE['trialName']}"
    text = json.dumps(katib.substitute(exp, {k: v for k, v in SAMPLE.items() if k in declared}))
    assert "${trialParameters." not in text


def test_katibs_collector_wrapping_keeps_the_json_argument_intact():
    # Katib's StdOut collector appends to the `sh -c` script: "<script> 1>/var/log/katib/metrics.log 2>&1 && ..."
    exp = render_experiment(SPEC, name(), "ml", S3)
    script = katib.substitute(exp, SAMPLE)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    wrapped = shlex.split(f"{script} 1>/var/log/katib/metrics.log 2>&1 && echo completed > /var/log/katib/1.pid")
    assert json.loads(wrapped[wrapped.index("--hyperparameters") + 1])["optimizer"] == "sgd"
    assert not script.startswith("exec ")


def test_experiment_names_fit_katibs_rule():
    for run_id in ("run-1", "A" * 200, "pipeline/run:2026-07-10T09:00:00Z"):
        generated = katib.experiment_name(run_id, "tune")
        assert len(generated) <= 40 and katib.NAME_PATTERN.match(generated)
        render_experiment(SPEC, generated, "ml", S3)
    assert katib.experiment_name("run-1") == katib.experiment_name("run-1")
    for bad in ("a" * 41, "Tune-1", "1tune", "tune-"):
        with pytest.raises(SlipwayError, match="Experiment name .* at most 40"):
            render_experiment(SPEC, bad, "ml", S3)


def test_trial_parameter_names_are_katib_safe_and_unique():
    raw = copy.deepcopy(SPEC)
    raw["parameters"] += [
        {"name": "learning-rate", "parameterType": "double", "feasibleSpace": {"min": "0.1", "max": "0.2"}},
        {"name": "2nd.layer", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "2"}},
    ]
    names = katib.trial_parameter_names(katib.tune_spec.load_spec(raw))
    assert names["learning_rate"] == "learningRate" and names["learning-rate"] == "learningRate2"
    assert names["2nd.layer"] == "p2ndLayer"
    exp = render_experiment(raw, name(), "ml", S3)
    assert admission_errors(exp) == []


@pytest.mark.parametrize("change, expected", [
    (dict(workers=0), "workers must be an integer >= 1"),
    (dict(metrics_collector="File"), "metrics collector 'File' is not supported"),
    (dict(module_file=""), "module_file is required"),
    (dict(storage=None), "object-store URI but no credentials Secret"),
    (dict(hyperparameters={"f": object()}), "not JSON-serialisable"),
])
def test_bad_trial_settings_are_one_line_errors(change, expected):
    import dataclasses

    with pytest.raises(SlipwayError) as info:
        render_experiment(SPEC, name(), "ml", dataclasses.replace(S3, **change))
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_categorical_values_that_cannot_survive_substitution_are_refused():
    raw = copy.deepcopy(SPEC)
    raw["parameters"][3]["feasibleSpace"]["list"] = ["adam", 'say "hi"']
    with pytest.raises(SlipwayError, match="quote, backslash"):
        render_experiment(raw, name(), "ml", S3)


def test_bad_search_specs_fail_before_rendering():
    for bad, expected in ((dict(SPEC, parameters=[]), "parameter list is empty"),
                          (dict(SPEC, parallelTrialCount=9), "greater than maxTrialCount"),
                          (dict(SPEC, algorithm={"algorithmName": "annealing"}), "unknown algorithm")):
        with pytest.raises(SlipwayError, match=expected):
            render_experiment(bad, name(), "ml", S3)


# --- the validators reject what Katib would reject ----------------------------------------------------------------


def _set(path, value):
    def change(exp):
        *parents, last = path
        node = exp
        for key in parents:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return change


_DELETE = object()


def _add_undeclared(exp):
    container = exp["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    container["command"][2] += " --seed ${trialParameters.seed}"


def _drop_declared_use(exp):
    exp["spec"]["trialTemplate"]["trialParameters"].append({"name": "unused", "reference": "${trialSpec.Namespace}"})


@pytest.mark.parametrize("breakage, expected", [
    (_set(["metadata", "name"], "t" * 41), "longer than 40"),
    (_set(["metadata", "name"], "Tune-1"), "does not match"),
    (_set(["spec", "maxTrialCount"], 0), "maxTrialCount: must be greater than 0"),
    (_set(["spec", "parallelTrialCount"], 7), "parallelTrialCount: should be less than or equal"),
    (_set(["spec", "parallelTrialCount"], 0), "parallelTrialCount: must be greater than 0"),
    (_set(["spec", "maxFailedTrialCount"], 9), "maxFailedTrialCount: should be less than or equal"),
    (_set(["spec", "maxFailedTrialCount"], -1), "maxFailedTrialCount: should not be less than 0"),
    (_set(["spec", "objective", "type"], "maximise"), "must be minimize or maximize"),
    (_set(["spec", "objective", "objectiveMetricName"], ""), "objectiveMetricName: must be specified"),
    (_set(["spec", "objective", "additionalMetricNames"], ["val_accuracy"]), "should not contain"),
    (_set(["spec", "algorithm", "algorithmName"], "genetic"), "no Suggestion config"),
    (_set(["spec", "earlyStopping", "algorithmName"], "patience"), "no EarlyStopping config"),
    (_set(["spec", "parameters"], []), "spec.parameters or spec.nasConfig must be specified"),
    (_set(["spec", "parameters", 0, "parameterType"], "float"), "parameterType: 'float' is not supported"),
    (_set(["spec", "parameters", 0, "feasibleSpace", "min"], ""), "feasibleSpace.max or feasibleSpace.min"),
    (_set(["spec", "parameters", 3, "feasibleSpace", "max"], "3"), ".max, .min and .step are not supported"),
    (_set(["spec", "parameters", 0, "feasibleSpace", "distribution"], "gauss"), "distribution: 'gauss'"),
    (_set(["spec", "trialTemplate", "primaryContainerName"], ""), "primaryContainerName: must be specified"),
    (_set(["spec", "trialTemplate", "trialParameters", 0, "reference"], "lr"), "reference lr does not exist"),
    (_set(["spec", "trialTemplate", "trialParameters", 1, "name"], "learningRate"), "can't be duplicated"),
    (_set(["spec", "trialTemplate", "trialParameters"], _DELETE), "trialParameters: must be specified"),
    (_set(["spec", "trialTemplate", "trialSpec", "metadata"], {"name": "x"}), "must be omitted"),
    (_set(["spec", "trialTemplate", "trialSpec", "apiVersion"], ""), "APIVersion and Kind"),
    (_set(["spec", "trialTemplate", "configMap"], {"configMapName": "c"}), "only one of"),
    (_set(["spec", "trialTemplate", "trialSpec"], _DELETE), "trialSpec or spec.trialTemplate.configMap"),
    (_add_undeclared, "not found in spec.trialParameters"),
    (_drop_declared_use, "unused in spec.trialParameters not found in spec.trialTemplate"),
])
def test_admission_rules_catch_broken_experiments(breakage, expected):
    exp = render_experiment(SPEC, name(), "ml", S3)
    breakage(exp)
    errors = admission_errors(exp)
    assert any(expected in e for e in errors), errors


def test_success_and_failure_conditions_are_required_for_an_mpijob_trial():
    exp = render_experiment(SPEC, name(), "ml", PVC)
    del exp["spec"]["trialTemplate"]["failureCondition"]
    assert any("successCondition and failureCondition" in e for e in admission_errors(exp))
    job = render_experiment(SPEC, name(), "ml", S3)
    del job["spec"]["trialTemplate"]["failureCondition"]  # Katib's defaulter fills it in for a batch Job
    assert admission_errors(job) == []


def test_the_schema_validator_rejects_wrong_types_and_unknown_fields(katib_validator):
    exp = render_experiment(SPEC, name(), "ml", S3)
    bad = copy.deepcopy(exp)
    bad["spec"]["maxTrialCount"] = "6"
    assert any("maxTrialCount" in e for e in schema_errors(katib_validator, bad))
    bad = copy.deepcopy(exp)
    bad["spec"]["parameters"][0]["feasibleSpace"]["min"] = 0.0001
    assert any("feasibleSpace.min" in e for e in schema_errors(katib_validator, bad))
    bad = copy.deepcopy(exp)
    bad["spec"]["maxTrialCounts"] = 6
    assert any("maxTrialCounts" in e for e in schema_errors(katib_validator, bad))


# --- running through the launcher -----------------------------------------------------------------------------------


T0 = "2026-07-10T09:00:00Z"


def cond(kind, status, reason, message, at=T0):
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastUpdateTime": at,
            "lastTransitionTime": at}


CREATED = {"startTime": T0, "conditions": [cond("Created", "True", "ExperimentCreated", "Experiment is created")],
           "currentOptimalTrial": {"bestTrialName": "", "observation": {}, "parameterAssignments": []}}
RUNNING = {**CREATED, "conditions": [*CREATED["conditions"],
                                     cond("Running", "True", "ExperimentRunning", "Experiment is running")],
           "trials": 2, "trialsRunning": 2, "runningTrialList": ["t-1", "t-2"]}
BEST = {"bestTrialName": "TRIAL",
        "parameterAssignments": [{"name": "learning_rate", "value": "0.0123"}, {"name": "hidden_units", "value": "48"},
                                 {"name": "batch_size", "value": "64"}, {"name": "optimizer", "value": "sgd"}],
        "observation": {"metrics": [{"name": "val_accuracy", "latest": "0.91", "max": "0.93", "min": "0.71"},
                                    {"name": "val_loss", "latest": "0.30", "max": "0.61", "min": "0.28"}]}}
SUCCEEDED = {"startTime": T0, "completionTime": "2026-07-10T10:00:00Z",
             "conditions": [CREATED["conditions"][0],
                            cond("Running", "False", "ExperimentRunning", "Experiment is running"),
                            cond("Succeeded", "True", "ExperimentMaxTrialsReached",
                                 "Experiment has succeeded because max trial count has reached")],
             "currentOptimalTrial": BEST, "trials": 6, "trialsSucceeded": 5, "trialsFailed": 1,
             "succeededTrialList": ["t-1", "t-2", "t-3", "t-4", "t-5"], "failedTrialList": ["t-6"]}
FAILED = {"startTime": T0, "completionTime": "2026-07-10T09:20:00Z",
          "conditions": [CREATED["conditions"][0],
                         cond("Running", "False", "ExperimentRunning", "Experiment is running"),
                         cond("Failed", "True", "ExperimentMaxFailedTrialsReached",
                              "Experiment has failed because max failed count has reached")],
          "currentOptimalTrial": CREATED["currentOptimalTrial"], "trials": 4, "trialsFailed": 3, "trialsSucceeded": 1,
          "failedTrialList": ["t-1", "t-2", "t-4"], "succeededTrialList": ["t-3"]}


@pytest.fixture
def poll():
    clock = {"now": 0.0}

    def sleep(seconds):
        clock["now"] += seconds

    return launcher.Poll(sleep=sleep, clock=lambda: clock["now"])


def run(server, tmp_path, poll, **kwargs):
    kwargs.setdefault("delete_policy", "on_success")
    return cluster_backend.run_on_cluster(SPEC, name(), "ml", S3, client=server,
                                          reference_file=str(tmp_path / "exp.ref"), timeout_s=7200, poll=poll, **kwargs)


def test_run_on_cluster_returns_the_result_schema(tmp_path, poll, katib_validator):
    server = FakeApiServer([CREATED, RUNNING, RUNNING, SUCCEEDED])
    result = run(server, tmp_path, poll)
    assert result == {
        "objective": {"type": "maximize", "metric": "val_accuracy", "goal": 0.95, "value": 0.93},
        "parameters": {"learning_rate": 0.0123, "hidden_units": 48, "batch_size": 64, "optimizer": "sgd"},
        "metrics": {"val_accuracy": 0.93, "val_loss": 0.61},  # Katib's defaulter: max for a maximize objective
        "trial": "TRIAL",
        "trials": [],
        "counts": {"succeeded": 5, "failed": 1, "early_stopped": 0, "running": 0, "pending": 0, "killed": 0,
                   "metrics_unavailable": 0, "total": 6},
        "backend": "kubernetes",
        "experiment": f"ml/{name()}",
        "algorithm": "tpe",
        "reason": "ExperimentMaxTrialsReached",
    }
    assert server.calls.count(("create", name())) == 1 and ("delete", name()) in server.calls
    assert launcher.read_reference(tmp_path / "exp.ref").kind == "Experiment"
    for status in (CREATED, RUNNING, SUCCEEDED, FAILED):  # the scripted statuses are real Experiment shapes
        assert schema_errors(katib_validator, {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
                                               "status": status}) == []


def test_run_on_cluster_reattaches_instead_of_creating_twice(tmp_path, poll):
    server = FakeApiServer([RUNNING, SUCCEEDED])
    server.create(render_experiment(SPEC, name(), "ml", S3))  # a previous launcher pod created it
    run(server, tmp_path, poll, delete_policy="never")
    assert [c for c in server.calls if c[0] == "create"] == [("create", name())]
    assert ("delete", name()) not in server.calls


def test_a_failed_experiment_raises_one_line_naming_max_failed_trial_count(tmp_path, poll):
    server = FakeApiServer([CREATED, RUNNING, FAILED])
    with pytest.raises(SlipwayError) as info:
        run(server, tmp_path, poll, delete_policy="always")
    message = str(info.value)
    assert "\n" not in message
    assert f"Katib Experiment ml/{name()} failed" in message
    assert "ExperimentMaxFailedTrialsReached" in message and "maxFailedTrialCount=2" in message
    assert "3 failed" in message and "t-1, t-2, t-4" in message
    assert ("delete", name()) in server.calls  # delete_policy always


def test_a_trial_without_metric_lines_is_named_in_the_failure(tmp_path, poll):
    """Katib 0.19 counts a MetricsUnavailable trial as failed and lists it apart from failedTrialList (what the real
    controller wrote for an objective the trainer never prints: tests/test_kfp_operators.py)."""
    unavailable = {**FAILED, "trials": 3, "trialsFailed": 0, "trialsSucceeded": 0, "trialMetricsUnavailable": 3,
                   "failedTrialList": None, "succeededTrialList": None, "metricsUnavailableTrialList": ["t-9"],
                   # the reason the real controller gave (not ExperimentMaxFailedTrialsReached)
                   "conditions": [*FAILED["conditions"][:2], cond("Failed", "True", "ExperimentFailed",
                                                                  FAILED["conditions"][2]["message"])]}
    server = FakeApiServer([CREATED, unavailable])
    with pytest.raises(SlipwayError) as info:
        run(server, tmp_path, poll)
    message = str(info.value)
    assert "trials: 3 metrics unavailable; more than maxFailedTrialCount=2" in message  # SPEC's count
    assert message.endswith("; trials whose metric lines Katib's collector did not find: t-9"), message


def test_success_without_any_reported_metric_is_an_error(tmp_path, poll):
    no_best = {**SUCCEEDED, "currentOptimalTrial": CREATED["currentOptimalTrial"], "trialsSucceeded": 0,
               "trialsFailed": 0, "trialMetricsUnavailable": 6}
    server = FakeApiServer([CREATED, no_best])
    with pytest.raises(SlipwayError, match=r"without any trial reporting the objective metric 'val_accuracy'.*"
                                           r"6 metrics unavailable.*epoch=<n> val_accuracy=<value>"):
        run(server, tmp_path, poll)


# --- slipway render experiment --------------------------------------------------------------------------------------


def render_cli(argv) -> str:
    parser = argparse.ArgumentParser()
    add_render_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    assert run_render(parser.parse_args(["render", "experiment", *argv]), out) == 0
    return out.getvalue()


def test_render_experiment_cli(tmp_path, katib_validator, mpijob_validator):
    spec_file = tmp_path / "search.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    common = ["--spec", str(spec_file), "--namespace", "team-a", "--module-file", "/opt/m.py"]
    text = render_cli([*common, "--name", "tune-demo", "--workers", "1", "--secret", "minio-creds",
                       "--s3-endpoint", "http://minio.kubeflow:9000", "--transformed-examples", "s3://b/te",
                       "--transform-graph", "s3://b/tg", "--hyperparameters", '{"epochs": 2}'])
    exp = yaml.safe_load(text)
    assert exp["metadata"] == {"name": "tune-demo", "namespace": "team-a"}
    assert schema_errors(katib_validator, exp) == [] and admission_errors(exp) == []
    assert hyperparameters_after_substitution(exp)[0]["epochs"] == 2
    exp = yaml.safe_load(render_cli([*common, "--run-id", "run-7", "--workers", "2", "--pvc", "shared",
                                     "--transformed-examples", "/data/te", "--transform-graph", "/data/tg"]))
    assert exp["metadata"]["name"] == katib.experiment_name("run-7", "tune")
    assert exp["spec"]["trialTemplate"]["trialSpec"]["kind"] == "MPIJob"
    assert admission_errors(exp) == []
    with pytest.raises(SlipwayError, match="either --secret"):
        render_cli([*common, "--name", "x", "--secret", "s", "--pvc", "p", "--transformed-examples", "/d",
                    "--transform-graph", "/g"])
