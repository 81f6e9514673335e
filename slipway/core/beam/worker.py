"""The Beam SDK harness of a remote runner's workers, with the object store ready: `slipway-beam-worker`.

A runner whose workers run elsewhere (Flink's TaskManagers, Prism, Spark's executors) starts the Python SDK harness
as Beam's container contract says: a program called with --id, --control_endpoint, --logging_endpoint,
--artifact_endpoint and --provision_endpoint. Beam's own harness started that way reads s3:// through Beam's S3
filesystem (boto3), but TensorFlow's tf.io.gfile, which TFT (its temporary SavedModels) and TFMA (loading the
model) use in the workers, reads s3:// only once tensorflow-io is imported, and nothing in a plain harness imports
it. So this program prepares the process (`prepare`) and then runs Beam's harness.

- PROCESS environment: `--environment_type=PROCESS --environment_config={"command": "slipway-beam-worker"}`.
- EXTERNAL environment (a worker pool beside each TaskManager or executor): `python -m
  apache_beam.runners.worker.worker_pool_main --service_port=50000 --container_executable=slipway-beam-worker`,
  then `--environment_type=EXTERNAL --environment_config=HOST:50000`.

The object store's address and credentials come from the worker's own environment (S3_ENDPOINT, S3_USE_HTTPS,
AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: on a cluster from the Secret slipway-object-store), never
from pipeline options, which runners log and show in their UIs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

# Beam's S3 filesystem builds a boto3 client with the endpoint its options give (none here), and boto3 then reads
# AWS_ENDPOINT_URL_S3; tensorflow-io reads S3_ENDPOINT. One setting serves both.
_BOTO3_FROM_TENSORFLOW_IO = {"AWS_ENDPOINT_URL_S3": "S3_ENDPOINT", "AWS_DEFAULT_REGION": "AWS_REGION"}


def prepare(environ: dict | None = None) -> None:
    """Make s3:// readable in this process by tf.io.gfile (tensorflow-io) and Beam's S3 filesystem (boto3), from
    the S3_* and AWS_* variables; a no-op for what is already set. Called by the harness below and by the step
    that submits the pipeline (the runner's client reads and writes the same URIs)."""
    environ = os.environ if environ is None else environ
    for boto3_name, name in _BOTO3_FROM_TENSORFLOW_IO.items():
        if environ.get(name) and not environ.get(boto3_name):
            environ[boto3_name] = environ[name]
    # Registers the s3:// filesystem with tf.io.gfile (this module's package has already set the Keras variable
    # tensorflow-io's import needs). An environment without it still reads what Beam's filesystems read.
    with contextlib.suppress(ImportError):
        import tensorflow_io  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    """Beam's container contract: run one SDK harness for the runner at --control_endpoint."""
    parser = argparse.ArgumentParser(prog="slipway-beam-worker", description=__doc__.splitlines()[0])
    parser.add_argument("--id", required=True, help="the worker id the runner gave")
    parser.add_argument("--control_endpoint", required=True, help="the runner's control service")
    for unused in ("--logging_endpoint", "--artifact_endpoint", "--provision_endpoint", "--semi_persist_dir"):
        parser.add_argument(unused, default="", help="accepted and unused: the code is in this environment")
    args, _ = parser.parse_known_args(argv)
    prepare()
    from slipway.core.beam.pipelines import remember_what_beam_rereads

    remember_what_beam_rereads()  # a worker builds a bundle processor for every bundle, each reading its DoFns again
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    # Beam's S3 filesystem is built from the options set here (Beam's own boot sets the pipeline's); empty ones
    # leave boto3 to read the environment prepared above.
    FileSystems.set_options(PipelineOptions([]))

    # Beam's worker pool starts its own harness the same way (state cache off, no data buffering deadline).
    SdkHarness(args.control_endpoint, worker_id=args.id, state_cache_size=0, data_buffer_time_limit_ms=-1).run()
    # The runner closed the control channel: done. Skip interpreter teardown, in which tensorflow-io's s3
    # filesystem aborts ("pure virtual method called", as in slipway.core.step).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
