"""A user's kfp project that installed the authoring wheel (slipway-kfp), run by tests/test_authoring.py inside an
environment holding only kfp, kfp-kubernetes and the wheel: no TensorFlow, no Beam, no Slipway runtime.

    python authoring_project.py OUT_DIR

It composes its own pipeline from our components with kfp-kubernetes options, loads one component from its
component.yaml as a YAML-only user would, compiles each of our components and pipelines, and writes what it
compiled and the versions it ran with under OUT_DIR for the test to compare with the committed YAML.
"""

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

from kfp import compiler, components, dsl, kubernetes

import slipway.components as slipway_components
from slipway.components import (
    BatchPredictOp,
    DeployOp,
    EvaluateOp,
    IngestOp,
    MonitorOp,
    ResolveBaselineOp,
    TrainOp,
    TransformOp,
    ValidateOp,
)
from slipway.pipelines import build_all

RUNTIME_ONLY = ("tensorflow", "tensorflow_transform", "tensorflow_model_analysis", "apache_beam", "ml_metadata")
COMPONENT_FUNCTIONS = {"IngestOp": "ingest", "ValidateOp": "validate", "TransformOp": "transform", "TuneOp": "tune",
                       "TrainOp": "train", "ResolveBaselineOp": "resolve_baseline", "EvaluateOp": "evaluate",
                       "DeployOp": "deploy", "BatchPredictOp": "batch_predict", "MonitorOp": "monitor"}
VALIDATE_YAML = Path(slipway_components.__file__).parent / "validate" / "component.yaml"
validate_from_yaml = components.load_component_from_file(str(VALIDATE_YAML))


def on_cluster(task, trainer: bool = False):
    """What a platform team adds to every pod: the object store's Secret, a node pool for training."""
    kubernetes.use_secret_as_env(task, secret_name="mlpipeline-minio-artifact",
                                 secret_key_to_env={"accesskey": "AWS_ACCESS_KEY_ID",
                                                    "secretkey": "AWS_SECRET_ACCESS_KEY"})
    if trainer:
        kubernetes.add_node_selector(task, label_key="cloud.google.com/gke-accelerator", label_value="nvidia-l4")
        kubernetes.add_toleration(task, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        task.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    return task


@dsl.pipeline(name="churn-training", description="A user's pipeline built from Slipway's components")
def churn_training(data: str = "s3://mlpipeline/churn/raw.csv", module_file: str = "/opt/churn/model.py"):
    ingest = on_cluster(IngestOp(data=data, label="churned"))
    validate = on_cluster(validate_from_yaml(examples=ingest.outputs["examples"]))
    transform = on_cluster(TransformOp(examples=ingest.outputs["examples"], schema=validate.outputs["schema"],
                                       module_file=module_file))
    train = on_cluster(TrainOp(transformed_examples=transform.outputs["transformed_examples"],
                               transform_graph=transform.outputs["transform_graph"], module_file=module_file,
                               workers=2, backend="kubernetes"), trainer=True)
    baseline = on_cluster(ResolveBaselineOp(pipeline_name="churn-training", baseline_model="auto"))
    baseline.after(train)
    evaluate = on_cluster(EvaluateOp(model=train.outputs["model"], examples=ingest.outputs["examples"],
                                     module_file=module_file, baseline_model=baseline.outputs["baseline_model"]))
    on_cluster(DeployOp(model=train.outputs["model"], blessing=evaluate.outputs["blessing"],
                        examples=ingest.outputs["examples"], model_name="churn", model_base="s3://models/churn",
                        backend="kubernetes"))
    ValidateOp(examples=ingest.outputs["examples"], allow_anomalies=True)  # also composable from Python
    # Optional inputs: the examples given, the blessing left out.
    BatchPredictOp(model=train.outputs["model"], examples=ingest.outputs["examples"], splits="eval")
    # A returned decision a pipeline branches on.
    check = MonitorOp(payload_logs="s3://logs/payloads", model_name="churn", model_base="s3://models/churn")
    with dsl.If(check.outputs["drifted"] == True):  # noqa: E712  (a KFP condition, not a Python comparison)
        IngestOp(data="s3://warehouse/churn/latest.csv", label="churned")


def main(out: Path) -> None:
    present = [name for name in RUNTIME_ONLY if importlib.util.find_spec(name) is not None]
    if present:
        sys.exit(f"the authoring environment has runtime libraries: {present}")
    (out / "components").mkdir(parents=True)
    (out / "pipelines").mkdir()
    compiler.Compiler().compile(churn_training, str(out / "user_pipeline.yaml"))
    for export, name in COMPONENT_FUNCTIONS.items():
        compiler.Compiler().compile(getattr(slipway_components, export), str(out / "components" / f"{name}.yaml"))
    for name, pipeline in build_all().items():
        compiler.Compiler().compile(pipeline, str(out / "pipelines" / f"{name}.yaml"))
    versions = {name: importlib.metadata.version(name) for name in ("kfp", "kfp-kubernetes", "protobuf")}
    (out / "versions.json").write_text(json.dumps(versions))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
