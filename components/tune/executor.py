"""Tune: a hyper-parameter search in Katib's own spec shape, run as local trial processes or as a Katib
Experiment, with one SDK-independent result that the pipeline feeds to the train step.

Plain Python, no kfp import. Trials reuse the already-transformed data and run the trainer entry point with
`--no-export`; they take trial_hyperparameters (e.g. {"epochs": 2}) over the base ones, so each is short, while
the returned `hyperparameters` (base + best parameters) are what the full training uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import slipway  # noqa: F401  (environment defaults first)
from slipway.components.tune import katib, local, report
from slipway.components.tune.spec import load_spec
from slipway.core.artifacts import atomic_write_text
from slipway.core.cluster import gfile_uri, own_namespace, parse_config, storage_spec
from slipway.core.errors import SlipwayError
from slipway.core.mpijob import Resources

RESULT_SCHEMA_VERSION = 1


def _json_object(text: str | dict | None, name: str) -> dict:
    if isinstance(text, dict):
        return dict(text)
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise SlipwayError(f"{name}: not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise SlipwayError(f"{name}: expected a JSON object")
    return value


def run(
    transformed_examples_dir: str,
    transform_graph_dir: str,
    module_file: str,
    search_spec: str | dict,
    result_path: str,
    report_path: str,
    hyperparameters: str | dict = "{}",
    trial_hyperparameters: str | dict = "{}",
    backend: str = "local",
    cluster: str | dict = "{}",
    workers: int = 1,
    work_dir: str = "",
    trial_timeout_s: float = 0,
    identity: str = "",
    trainer_image: str = "",
) -> dict:
    """Run the search; write the result JSON and an HTML table of trials; return the result."""
    spec = load_spec(search_spec)
    base = _json_object(hyperparameters, "hyperparameters")
    for_trials = {**base, **_json_object(trial_hyperparameters, "trial_hyperparameters")}
    if not Path(module_file).is_file():
        raise SlipwayError(f"module file {module_file}: not found")
    if backend == "local":
        if workers != 1:
            raise SlipwayError("tune: local trials run one process each; workers > 1 needs backend kubernetes")
        scratch = work_dir or tempfile.mkdtemp(prefix="slipway-tune-")
        result = local.run_local_search(
            spec, scratch, transformed_examples=transformed_examples_dir, transform_graph=transform_graph_dir,
            module_file=module_file, base_hyperparameters=for_trials, trial_timeout_s=trial_timeout_s or None,
        )
    elif backend == "kubernetes":
        result = _run_katib(spec, transformed_examples_dir, transform_graph_dir, module_file, for_trials,
                            parse_config(cluster, default_image=trainer_image), workers, identity or result_path,
                            os.path.dirname(result_path) or ".")
    else:
        raise SlipwayError(f"backend {backend!r}: expected local or kubernetes")
    result["hyperparameters"] = {**base, **result["parameters"]}
    result["schema_version"] = RESULT_SCHEMA_VERSION
    atomic_write_text(result_path, json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    atomic_write_text(report_path, report.trials_html(result))
    return result


def _run_katib(spec, examples, graph, module_file, for_trials, config, workers, identity, reference_dir):
    key = hashlib.sha256(identity.encode()).hexdigest()[:12]
    trial = katib.TrialSettings(
        transformed_examples=gfile_uri(examples), transform_graph=gfile_uri(graph), module_file=module_file,
        image=config.image, workers=workers, slots_per_worker=config.slots_per_worker, hyperparameters=for_trials,
        storage=storage_spec(config), resources=Resources(cpu=config.cpu, memory=config.memory, gpus=config.gpus),
        launcher_resources=Resources(cpu=config.launcher_cpu, memory=config.launcher_memory),
        service_account=config.service_account, run_id=key, task="tune",
    )
    name = katib.experiment_name(key)
    return katib.run_on_cluster(spec, name, own_namespace(config), trial,
                                reference_file=os.path.join(reference_dir, f"{name}.ref.json"),
                                timeout_s=config.timeout_s, delete_policy=config.delete_policy)
