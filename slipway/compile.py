"""Write each component's component.py from its spec.py, compile every component and pipeline to the YAML committed
beside it, and render the example cluster manifests under manifests/; --check fails if one is stale or names one of
our images without a digest.

Images come from images/digests.json (slipway.core.images): a compile whose digests file cannot pin an image the
components need fails first, with one line naming it."""

from __future__ import annotations

import difflib
import importlib
import re
import tempfile
from pathlib import Path

from kfp import compiler

from slipway.components import COMPONENTS
from slipway.core import images

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS_DIR = ROOT / "components"
PIPELINES_DIR = ROOT / "pipelines"
MANIFESTS_DIR = ROOT / "manifests"
EXAMPLE_URIS = {"transformed_examples": "s3://mlpipeline/example-run/transform/transformed_examples",
                "transform_graph": "s3://mlpipeline/example-run/transform/transform_graph",
                "module_file": "/opt/slipway/pipelines/modules/taxi.py"}


def targets() -> dict[Path, object]:
    """Where each compiled YAML lives, and what it is compiled from (importing the component.py files: call
    component_files first, so they hold what their specs say)."""
    from slipway.pipelines import build_all

    return {
        **{COMPONENTS_DIR / name / "component.yaml": _component(name) for name in COMPONENTS},
        **{PIPELINES_DIR / f"{name}.yaml": pipeline for name, pipeline in build_all().items()},
        MANIFESTS_DIR / "mpijob-example.yaml": example_mpijob,
        MANIFESTS_DIR / "katib-experiment-example.yaml": example_experiment,
        MANIFESTS_DIR / "inferenceservice-example.yaml": example_inference_service,
        MANIFESTS_DIR / "kserve-serving-runtime.yaml": serving_runtime,
    }


def _component(name: str):
    """The KFP component of that name (its package's component.py defines a function of the same name)."""
    return getattr(importlib.import_module(f"slipway.components.{name}.component"), name)


def example_mpijob() -> str:
    """What the train component's kubernetes backend creates for 2 GPU workers on MinIO (object store)."""
    from slipway.core.training import mpijob
    from slipway.core.training.trainer_command import TrainerCommand

    spec = mpijob.MPIJobSpec(
        name="taxi-train-example", namespace="kubeflow-user", workers=2,
        trainer_args=TrainerCommand(model_dir="s3://mlpipeline/example-run/train/model.mpijob/model",
                                    hyperparameters='{"epochs": 3}', **EXAMPLE_URIS).args(),
        worker_resources=mpijob.Resources(cpu="4", memory="16Gi", gpus=1),
        storage=mpijob.ObjectStore(secret_name="mlpipeline-minio-artifact",
                                   endpoint="http://minio-service.kubeflow:9000", use_https=False, verify_ssl=False),
    )
    return "# Rendered by `slipway compile` (slipway/compile.py): an example, not applied by anything.\n" + \
        mpijob.render_yaml(spec)


def example_experiment() -> str:
    """What the tune component's kubernetes backend creates for the taxi search with single-process trials."""
    from slipway.components.tune import katib
    from slipway.core.training import mpijob

    trial = katib.TrialSettings(
        **EXAMPLE_URIS, hyperparameters={"epochs": 2},
        storage=mpijob.ObjectStore(secret_name="mlpipeline-minio-artifact",
                                   endpoint="http://minio-service.kubeflow:9000", use_https=False, verify_ssl=False),
    )
    text = katib.render_yaml(str(PIPELINES_DIR / "modules" / "taxi_search.yaml"), "taxi-tune-example",
                             "kubeflow-user", trial)
    return "# Rendered by `slipway compile` (slipway/compile.py): an example, not applied by anything.\n" + text


def example_inference_service() -> str:
    """What the deploy component's kubernetes backend creates for the taxi model on MinIO (Serverless mode)."""
    from slipway.components.deploy import inference_service

    settings = inference_service.parse_settings({"namespace": "kubeflow-user", "service_account": "kserve-minio",
                                                 "min_replicas": 1, "max_replicas": 3})
    text = inference_service.render_yaml("taxi", "kubeflow-user", "s3://mlpipeline/serving/taxi", 1, settings)
    return "# Rendered by `slipway compile` (slipway/compile.py): an example, not applied by anything.\n" + text


def serving_runtime() -> str:
    """Our serving image (pinned) as KServe's runtime for tensorflow, where TF Serving's image cannot be pulled."""
    import yaml

    from slipway.components.deploy import inference_service

    body = inference_service.serving_runtime(images.image_reference("serving"))
    return ("# Rendered by `slipway compile` (slipway/compile.py). Apply it where KServe's TF Serving runtime\n"
            "# cannot be pulled: `kubectl apply -f manifests/kserve-serving-runtime.yaml` (components/deploy).\n"
            + yaml.safe_dump(body, sort_keys=False))


def compile_pipelines(options, output_dir: Path) -> list[Path]:
    """The pipelines compiled with these KubernetesOptions into output_dir (not the committed copies)."""
    from slipway.pipelines import build_all

    images.require_pinned()
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, pipeline in build_all(options).items():
        path = output_dir / f"{name}.yaml"  # the committed copy's name in pipelines/
        path.write_text(compile_to_text(pipeline))
        written.append(path)
    return written


def compile_to_text(func) -> str:
    if func in (example_mpijob, example_experiment, example_inference_service, serving_runtime):
        return func()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "out.yaml"
        compiler.Compiler().compile(func, str(path))
        return path.read_text()


# Any reference to one of our images: `image: ...`, a parameter default, a manifest's container.
OUR_IMAGE = re.compile(r"[\w.:/-]*slipway-(?:runtime|trainer|serving)(?:[:@][\w.:@-]*)?")


def component_files(check: bool = False) -> list[str]:
    """Write (or, with check, compare) each components/<name>/component.py and its README's interface table from its
    spec.py; return the stale ones. Written before any component.py is imported: kfp embeds the function's source
    as the file holds it."""
    from slipway.core.component_spec import component_source, with_interface

    problems = []
    for name in COMPONENTS:
        spec = importlib.import_module(f"slipway.components.{name}.spec").SPEC
        folder = COMPONENTS_DIR / name
        readme = (folder / "README.md").read_text()
        for path, text in ((folder / "component.py", component_source(spec)),
                           (folder / "README.md", with_interface(readme, spec))):
            if not check:
                path.write_text(text)
            elif not path.exists() or path.read_text() != text:
                problems.append(f"{path.relative_to(ROOT)} is stale: it is written from spec.py; run `slipway "
                                "compile`")
    return problems


def unpinned_images(text: str) -> list[str]:
    """Our image references in a compiled YAML that carry no digest."""
    return sorted({ref for ref in OUR_IMAGE.findall(text) if "/" in ref and not images.is_pinned(ref)})


def compile_all(check: bool = False) -> list[str]:
    """Write (or, with check, compare) every YAML; return the problems found (stale files, undigested images)."""
    images.require_pinned()
    problems = component_files(check)
    for path, func in targets().items():
        text = compile_to_text(func)
        if check:
            current = path.read_text() if path.exists() else ""
            for ref in unpinned_images(current):
                problems.append(f"{path.relative_to(ROOT)} names image {ref} without a digest")
            if current != text:
                diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), lineterm="", n=0))
                problems.append(f"{path.relative_to(ROOT)} is stale ({len(diff)} diff lines); run `slipway compile`")
        else:
            path.write_text(text)
    return problems
