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
from slipway.components.tune import cluster as cluster_backend
from slipway.components.tune import katib, local, report
from slipway.components.tune.search_spec import load_spec
from slipway.core import storage
from slipway.core.artifacts import atomic_write_text
from slipway.core.errors import SlipwayError, option_name
from slipway.core.json_text import json_object
from slipway.core.kube.cluster import (
    ClusterConfig,
    copy_inputs_to_claim,
    gfile_uri,
    own_namespace,
    parse_config,
    storage_spec,
)
from slipway.core.training.mpijob import Resources

RESULT_SCHEMA_VERSION = 1


def run(
    *,
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
    transformed_examples_uri: str = "",
    transform_graph_uri: str = "",
    reference_file: str = "",
) -> dict:
    """Run the search; write the result JSON and an HTML table of trials; return the result.

    The local backend's trials read transformed_examples_dir and transform_graph_dir. A Katib trial's pod cannot see
    this step's local paths: with the object store it reads the artifacts' URIs (transformed_examples_uri,
    transform_graph_uri: KFP's .uri, minio:// read as s3://), with a PVC copies of the inputs on the claim, as
    train's MPIJob does. module_file reaches the trials as given (a path in the trainer image or on the claim).
    reference_file: where the launcher keeps the Experiment's reference (the component's remote_job output).
    """
    spec = load_spec(search_spec)
    base = json_object(option_name("hyperparameters"), hyperparameters)
    for_trials = {**base, **json_object(option_name("trial_hyperparameters"), trial_hyperparameters)}
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
        paths = (transformed_examples_dir, transform_graph_dir)
        uris = (transformed_examples_uri or transformed_examples_dir, transform_graph_uri or transform_graph_dir)
        result = _run_katib(spec, paths, uris, module_file, for_trials,
                            parse_config(cluster, default_image=trainer_image), workers, identity or result_path,
                            reference_file or os.path.join(os.path.dirname(result_path) or ".", "experiment.ref.json"))
    else:
        raise SlipwayError(f"backend {backend!r}: expected local or kubernetes")
    result["hyperparameters"] = {**base, **result["parameters"]}
    result["schema_version"] = RESULT_SCHEMA_VERSION
    atomic_write_text(result_path, json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    atomic_write_text(report_path, report.trials_html(result))
    return result


def _trial_inputs(config: ClusterConfig, key: str, paths: tuple[str, str],
                  uris: tuple[str, str]) -> tuple[str, str, str]:
    """(scratch folder to remove afterwards or "", transformed examples, transform graph) where the trial pods read
    them: the artifacts' object-store URIs, or copies of this step's local inputs on the shared claim."""
    if config.pvc:
        return copy_inputs_to_claim(config, key, *paths)
    return "", gfile_uri(uris[0]), gfile_uri(uris[1])


def _run_katib(spec, paths, uris, module_file, for_trials, config, workers, identity, reference_file):
    key = hashlib.sha256(identity.encode()).hexdigest()[:12]
    work, examples, graph = _trial_inputs(config, key, paths, uris)
    trial = katib.TrialSettings(
        transformed_examples=examples, transform_graph=graph, module_file=module_file,
        image=config.image, workers=workers, slots_per_worker=config.slots_per_worker, hyperparameters=for_trials,
        storage=storage_spec(config), resources=Resources(cpu=config.cpu, memory=config.memory, gpus=config.gpus),
        launcher_resources=Resources(cpu=config.launcher_cpu, memory=config.launcher_memory),
        service_account=config.service_account, run_id=key, task="tune",
    )
    name = katib.experiment_name(key)
    result = cluster_backend.run_on_cluster(spec, name, own_namespace(config), trial,
                                          reference_file=reference_file,
                                          timeout_s=config.timeout_s, delete_policy=config.delete_policy)
    if work:
        storage.remove_tree(work)
    return result
