"""The tune component's local backend: real trial processes (tiny Python scripts, and once the real trainer)."""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

import slipway  # noqa: F401
from slipway.components.tune.local import run_local_search, run_search
from slipway.components.tune.local_trial import parse_metrics
from slipway.components.tune.report import metrics_for_kfp, trials_html
from slipway.core.errors import SlipwayError

# A trial: hyper-parameters JSON in argv[1], its folder in argv[2]; behaviour chosen by the hyper-parameters
# (the test's base hyper-parameters name trials that fail, hang or do badly).
TRIAL = textwrap.dedent(
    """
    import json, os, sys, time
    began = time.time()
    hp = json.loads(sys.argv[1])
    name = os.path.basename(sys.argv[2])
    with open(os.path.join(sys.argv[2], "pid"), "w") as f:
        f.write(str(os.getpid()))
    if hp.get("fail_all") or name in hp.get("fail", []):
        print("starting", flush=True)
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f"ValueError: boom in {name}", file=sys.stderr, flush=True)
        sys.exit(3)
    if name in hp.get("hang", []):
        time.sleep(600)
    x = float(hp.get("x", 0.5))
    epochs = int(hp.get("epochs", 2))
    for epoch in range(1, epochs + 1):
        time.sleep(float(hp.get("sleep", 0.0)))
        score = (1.0 - (x - 0.3) ** 2) * (0.5 + 0.5 * epoch / epochs)
        if name in hp.get("nan", []):
            score = float("nan")
        if name in hp.get("bad", []):
            score = 0.05
            time.sleep(0.3)
        print(f"epoch={epoch} loss={1 - score:.6f} score={score:.6f}", flush=True)
    with open(os.path.join(sys.argv[2], "span"), "w") as f:  # when it ran, by the machine's clock
        f.write(f"{began} {time.time()}")
    """
)

X = {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "0.0", "max": "1.0"}}


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trial") / "trial.py"
    path.write_text(TRIAL, encoding="utf-8")
    return path


def launcher(script: Path):
    return lambda hyperparameters, trial_dir: [sys.executable, str(script), json.dumps(hyperparameters), trial_dir]


def make_spec(parameters=(X,), algorithm="random", settings=None, max_trials=4, parallel=1, metric="score",
              goal=None, max_failed=None, early=None, objective_type="maximize") -> dict:
    spec = {
        "objective": {"type": objective_type, "objectiveMetricName": metric, "additionalMetricNames": ["loss"]},
        "algorithm": {"algorithmName": algorithm,
                      "algorithmSettings": [{"name": k, "value": str(v)} for k, v in (settings or {}).items()]},
        "parameters": list(parameters),
        "maxTrialCount": max_trials,
        "parallelTrialCount": parallel,
    }
    if goal is not None:
        spec["objective"]["goal"] = goal
    if max_failed is not None:
        spec["maxFailedTrialCount"] = max_failed
    if early is not None:
        spec["earlyStopping"] = {"algorithmName": "medianstop",
                                 "algorithmSettings": [{"name": k, "value": str(v)} for k, v in early.items()]}
    return spec


def search(script, tmp_path, spec, base=None, **kwargs) -> dict:
    return run_search(spec, launcher(script), str(tmp_path / "work"), base_hyperparameters=base or {}, **kwargs)


def test_parse_metrics_reads_katib_stdout_format():
    assert parse_metrics("epoch=2 loss=0.41 accuracy=0.86 val_loss=3.8e-01 val-auc = .9") == [
        ("epoch", 2.0), ("loss", 0.41), ("accuracy", 0.86), ("val_loss", 0.38), ("val-auc", 0.9)]
    assert parse_metrics('train result: {"metrics": {"loss": 0.3}}') == []
    assert parse_metrics("x=abc y=") == []
    nan = parse_metrics("epoch=1 loss=nan")
    assert nan[0] == ("epoch", 1.0) and nan[1][0] == "loss" and nan[1][1] != nan[1][1]


@pytest.mark.parametrize("parallel", [2, 1])
def test_parallel_trials_run_at_once(script, tmp_path, parallel):
    """parallelTrialCount trials run at once and never more, by each trial's own start and end (the search's wall
    time said so less surely: on a loaded CI machine four trials of 1 s, two at a time, took 4.4 s)."""
    result = search(script, tmp_path, make_spec(max_trials=4, parallel=parallel), {"epochs": 1, "sleep": 1.5})
    assert result["counts"] == {"succeeded": 4, "failed": 0, "early_stopped": 0, "killed": 0}
    spans = [tuple(map(float, (tmp_path / "work" / t["name"] / "span").read_text().split())) for t in result["trials"]]
    at_once = max(sum(began <= start < ended for began, ended in spans) for start, _ in spans)
    assert at_once == parallel, spans
    for trial in result["trials"]:
        assert (tmp_path / "work" / trial["name"] / "log.txt").read_text().startswith("epoch=1 loss=")


MIXED = [
    {"name": "lr", "parameterType": "double",
     "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}},
    {"name": "units", "parameterType": "int", "feasibleSpace": {"min": "2", "max": "10", "step": "2"}},
    {"name": "dropout", "parameterType": "discrete", "feasibleSpace": {"list": ["0", "0.25", "0.5"]}},
    {"name": "act", "parameterType": "categorical", "feasibleSpace": {"list": ["relu", "tanh"]}},
    X,
]


@pytest.mark.parametrize("algorithm", ["random", "tpe", "multivariate-tpe", "sobol", "cmaes"])
def test_each_algorithm_respects_bounds_and_types(script, tmp_path, algorithm):
    parameters = MIXED
    if algorithm == "cmaes":  # numeric parameters only (CMA-ES; the cmaes package is locked)
        parameters = [MIXED[0], MIXED[1], X]
    result = search(script, tmp_path, make_spec(parameters, algorithm, {"random_state": 3, "n_startup_trials": 2}
                                                if "tpe" in algorithm else {"random_state": 3},
                                                max_trials=7, parallel=2))
    assert result["counts"]["succeeded"] == 7 and result["algorithm"] == algorithm
    for trial in result["trials"]:
        p = trial["parameters"]
        assert isinstance(p["lr"], float) and 0.0001 <= p["lr"] <= 0.1
        assert type(p["units"]) is int and p["units"] in (2, 4, 6, 8, 10)
        assert isinstance(p["x"], float) and 0.0 <= p["x"] <= 1.0
        if algorithm != "cmaes":
            assert p["dropout"] in (0.0, 0.25, 0.5) and isinstance(p["dropout"], float)
            assert p["act"] in ("relu", "tanh")
    best = max(result["trials"], key=lambda t: t["objective"])
    assert result["trial"] == best["name"] and result["parameters"] == best["parameters"]
    assert result["objective"]["value"] == best["objective"] == max(best["objective_values"])


def test_grid_covers_the_grid_exactly_once(script, tmp_path):
    parameters = [
        {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "0", "max": "1", "step": "0.5"}},
        {"name": "n", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "4", "step": "2"}},
        {"name": "c", "parameterType": "categorical", "feasibleSpace": {"list": ["a", "b"]}},
    ]
    result = search(script, tmp_path, make_spec(parameters, "grid", max_trials=50, parallel=3))
    seen = [(t["parameters"]["x"], t["parameters"]["n"], t["parameters"]["c"]) for t in result["trials"]]
    assert sorted(seen) == sorted(itertools.product([0.0, 0.5, 1.0], [1, 3], ["a", "b"]))
    assert result["parameters"]["x"] == 0.5  # score peaks at x = 0.3


def test_grid_needs_a_step_for_doubles(script, tmp_path):
    with pytest.raises(SlipwayError, match="grid.*step"):
        search(script, tmp_path, make_spec([X], "grid"))


def test_random_with_a_seed_is_reproducible(script, tmp_path):
    def params(seed, folder):
        result = run_search(make_spec(MIXED, "random", {"random_state": seed}, max_trials=4, parallel=2),
                            launcher(script), str(tmp_path / folder))
        return [t["parameters"] for t in result["trials"]]

    first = params(11, "a")
    assert params(11, "b") == first
    assert params(12, "c") != first


def test_goal_reached_stops_the_search(script, tmp_path):
    result = search(script, tmp_path, make_spec(max_trials=6, goal="0.1"))
    assert result["goal_reached"] is True
    assert len(result["trials"]) == 1 and result["trial"] == "trial-0001"
    # with trials running at once, the ones still running when the goal is reached are killed (not failures)
    started = time.monotonic()
    parallel = run_search(make_spec(max_trials=6, parallel=2, goal="0.1"), launcher(script), str(tmp_path / "par"),
                          base_hyperparameters={"hang": ["trial-0002"]})
    assert time.monotonic() - started < 8
    assert [t["status"] for t in parallel["trials"]] == ["Succeeded", "Killed"]
    assert parallel["trials"][1]["reason"] == "search finished: goal reached"
    assert parallel["counts"] == {"succeeded": 1, "failed": 0, "early_stopped": 0, "killed": 1}
    unreachable = run_search(make_spec(max_trials=2, goal="5"), launcher(script), str(tmp_path / "other"))
    assert unreachable["goal_reached"] is False and len(unreachable["trials"]) == 2


def test_failed_trials_are_counted_with_their_reason(script, tmp_path):
    result = search(script, tmp_path, make_spec(max_trials=3, max_failed=1), {"fail": ["trial-0002"]})
    assert result["counts"] == {"succeeded": 2, "failed": 1, "early_stopped": 0, "killed": 0}
    failed = result["trials"][1]
    assert failed["status"] == "Failed" and failed["reason"] == "exited with code 3: ValueError: boom in trial-0002"
    assert result["trial"] in ("trial-0001", "trial-0003")


def test_max_failed_trial_count_fails_the_search(script, tmp_path):
    base = {"fail": ["trial-0002", "trial-0003", "trial-0004"]}
    with pytest.raises(SlipwayError) as caught:
        search(script, tmp_path, make_spec(max_trials=8, max_failed=2), base)
    assert str(caught.value) == ("search failed: 3 of 4 trials failed (maxFailedTrialCount 2); last failure: "
                                 "trial-0004: exited with code 3: ValueError: boom in trial-0004")
    saved = json.loads((tmp_path / "work" / "result.json").read_text())
    assert saved["error"] == str(caught.value) and len(saved["trials"]) == 4


def test_every_trial_failing_is_an_error(script, tmp_path):
    with pytest.raises(SlipwayError, match=r"^search failed: all 3 trials failed; last failure: trial-0003: "
                                           r"exited with code 3: ValueError: boom in trial-0003$"):
        search(script, tmp_path, make_spec(max_trials=3, parallel=2), {"fail_all": True})


def test_a_hanging_trial_is_killed_by_the_timeout(script, tmp_path):
    started = time.monotonic()
    result = search(script, tmp_path, make_spec(max_trials=3, parallel=2), {"hang": ["trial-0002"]},
                    trial_timeout_s=1.5)
    assert time.monotonic() - started < 10
    hung = result["trials"][1]
    assert hung["status"] == "Failed" and hung["reason"] == "timed out after 1.5 s"
    assert result["counts"]["succeeded"] == 2
    pid = int((tmp_path / "work" / "trial-0002" / "pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_objective_never_printed_fails_at_once(script, tmp_path):
    with pytest.raises(SlipwayError) as caught:
        search(script, tmp_path, make_spec(max_trials=5, metric="val_auc"))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("search failed: trial-0001: objective metric 'val_auc' was never printed "
                              "(printed: epoch, loss, score)")
    assert not (tmp_path / "work" / "trial-0002").exists()  # the budget was not burnt


def test_median_stopping_stops_a_bad_trial(script, tmp_path):
    base = {"epochs": 8, "sleep": 0.05, "bad": ["trial-0004"]}
    # A narrow space: the good trials' curves are practically the same, so only the bad one is below the median
    # (with x anywhere in [0, 1] a good trial far from the optimum is rightly stopped too).
    narrow = {"name": "x", "parameterType": "double", "feasibleSpace": {"min": "0.29", "max": "0.31"}}
    spec = make_spec(parameters=(narrow,), max_trials=5, early={"min_trials_required": 3, "start_step": 2})
    result = search(script, tmp_path, spec, base)
    statuses = [t["status"] for t in result["trials"]]
    assert statuses == ["Succeeded", "Succeeded", "Succeeded", "EarlyStopped", "Succeeded"]
    stopped = result["trials"][3]
    assert 2 <= len(stopped["objective_values"]) < 8 and "medianstop at step" in stopped["reason"]
    assert result["counts"]["early_stopped"] == 1


def test_minimize_with_latest_strategy(script, tmp_path):
    spec = make_spec(max_trials=3, metric="loss", objective_type="minimize")
    spec["objective"]["additionalMetricNames"] = ["score"]
    spec["objective"]["metricStrategies"] = [{"name": "loss", "value": "latest"}]
    result = search(script, tmp_path, spec)
    best = min(result["trials"], key=lambda t: t["metrics"]["loss"])
    assert result["trial"] == best["name"] and result["objective"]["value"] == best["objective_values"][-1]


@pytest.mark.parametrize("spec_change, message", [
    ({"algorithm": {"algorithmName": "hyperband"}}, "algorithm hyperband runs only on the kubernetes backend (Katib)"),
    ({"algorithm": {"algorithmName": "bayesianoptimization"}},
     "algorithm bayesianoptimization runs only on the kubernetes backend (Katib)"),
    ({"algorithm": {"algorithmName": "cmaes"}, "parameters": MIXED[2:4]}, "algorithm cmaes searches numeric"),
    ({"parameters": [{"name": "x", "parameterType": "double",
                      "feasibleSpace": {"min": "0", "max": "1", "distribution": "normal"}}]},
     "distribution normal is not supported by the local backend"),
])
def test_what_the_local_backend_cannot_run(script, tmp_path, spec_change, message):
    with pytest.raises(SlipwayError, match=re.escape(message)) as caught:
        search(script, tmp_path, {**make_spec(), **spec_change})
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "work" / "trial-0001").exists()


def test_result_file_and_report(script, tmp_path):
    out = tmp_path / "out" / "result.json"
    result = search(script, tmp_path, make_spec(max_trials=3, parallel=3), {"fail": ["trial-0002"], "epochs": 1},
                    result_path=str(out))
    assert json.loads(out.read_text()) == result
    assert result["hyperparameters"]["epochs"] == 1 and result["hyperparameters"]["x"] == result["parameters"]["x"]
    page = trials_html(result)
    assert "<script" not in page and "http" not in page
    assert page.count("<tr") == 4 and page.count('class="best"') == 1
    assert "ValueError: boom in trial-0002" in page
    metrics = metrics_for_kfp(result)
    assert metrics["best_score"] == result["objective"]["value"]
    assert metrics["trials_succeeded"] == 2.0 and metrics["trials_failed"] == 1.0 and metrics["trials"] == 3.0


# -- the real trainer ------------------------------------------------------------------------------------


def test_real_trainer_trials(tmp_path, transformed_inputs):
    made = transformed_inputs(tmp_path, num_classes=2, train=200, eval_=64)
    spec = make_spec(
        [{"name": "learning_rate", "parameterType": "double",
          "feasibleSpace": {"min": "0.001", "max": "0.1", "distribution": "logUniform"}},
         {"name": "hidden", "parameterType": "int", "feasibleSpace": {"min": "4", "max": "16"}}],
        "random", {"random_state": 1}, max_trials=2, parallel=2, metric="val_auc")
    result = run_local_search(spec, str(tmp_path / "work"), transformed_examples=str(tmp_path / "transformed"),
                              transform_graph=str(tmp_path / "graph"), module_file=str(made["module"]),
                              base_hyperparameters={"epochs": 1, "batch_size": 32}, trial_timeout_s=300,
                              env={"OMP_NUM_THREADS": "1"})
    assert result["counts"]["succeeded"] == 2, [t["reason"] for t in result["trials"]]
    for trial in result["trials"]:
        assert len(trial["objective_values"]) == 1 and {"loss", "val_loss", "val_auc"} <= set(trial["metrics"])
        assert not (tmp_path / "work" / trial["name"] / "model" / "saved_model.pb").exists()
    assert isinstance(result["parameters"]["hidden"], int)
    assert result["hyperparameters"]["epochs"] == 1 and 0.0 <= result["objective"]["value"] <= 1.0
    assert os.path.exists(tmp_path / "work" / "result.json")


def test_a_diverged_objective_fails_the_trial(script, tmp_path):
    result = search(script, tmp_path, make_spec(max_trials=2), {"nan": ["trial-0001"]})
    assert result["trials"][0]["status"] == "Failed"
    assert result["trials"][0]["reason"] == "objective metric 'score' was nan"
    assert result["trial"] == "trial-0002"


def test_sigterm_to_the_search_kills_its_trials(script, tmp_path):
    import signal
    import subprocess

    code = (
        "import json, sys; from slipway.components.tune.local import run_search; "
        f"spec = json.loads({json.dumps(json.dumps(make_spec(max_trials=2, parallel=2)))}); "
        f"run_search(spec, lambda hp, d: [sys.executable, {str(script)!r}, json.dumps(hp), d], "
        f"{str(tmp_path / 'work')!r}, base_hyperparameters={{'hang': ['trial-0001', 'trial-0002']}})"
    )
    search_process = subprocess.Popen([sys.executable, "-c", code])
    pid_files = [tmp_path / "work" / name / "pid" for name in ("trial-0001", "trial-0002")]
    deadline = time.monotonic() + 60
    while not all(f.exists() and f.read_text() for f in pid_files):
        assert time.monotonic() < deadline and search_process.poll() is None
        time.sleep(0.1)
    search_process.send_signal(signal.SIGTERM)
    assert search_process.wait(timeout=30) == 143
    time.sleep(0.3)
    for pid_file in pid_files:
        pid = int(pid_file.read_text())
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_report_draws_the_objective_by_trial(script, tmp_path):
    import xml.etree.ElementTree as ET

    result = search(script, tmp_path, make_spec(max_trials=4, settings={"random_state": 1}, goal=2.0),
                    {"fail": ["trial-0002"], "epochs": 1})
    page = trials_html(result)
    for remote in ("http://", "https://", "//cdn", "<script", "@import", "xlink", "src="):
        assert remote not in page
    [svg] = re.findall(r"<svg.*?</svg>", page, re.S)
    chart = ET.fromstring(svg)
    assert chart.find("title").text == "score by trial (higher is better)"

    # a point per trial that has an objective (not the failed one), at its trial number, higher for a better score
    points = [c for c in chart.iter("circle") if c.get("class") == "point"]
    scored = [t for t in result["trials"] if t["objective"] is not None]
    assert [p.find("title").text.split(" ")[0] for p in points] == [t["name"] for t in scored]
    assert "trial-0002" not in {t["name"] for t in scored}
    xs = [float(p.get("cx")) for p in points]
    assert xs[1] - xs[0] == pytest.approx(2 * (xs[2] - xs[1]), abs=0.2)  # trials 1, 3, 4: a gap where 2 failed
    by_height = sorted(zip((float(p.get("cy")) for p in points), (t["objective"] for t in scored), strict=True))
    assert [score for _, score in by_height] == sorted((t["objective"] for t in scored), reverse=True)

    # the best so far ends at the best trial's height; the unreachable goal is drawn above everything
    lines = {line.get("data-series"): line.get("points").split() for line in chart.iter("polyline")}
    assert set(lines) == {"best so far", "goal 2"}
    assert float(lines["best so far"][-1].split(",")[1]) == pytest.approx(by_height[0][0], abs=0.06)
    assert float(lines["goal 2"][0].split(",")[1]) < by_height[0][0]
