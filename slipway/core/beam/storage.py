"""Where a Beam step's workers read and write: the step's own files when the workers can see them, object-store
URIs when they run elsewhere. Decided here once for validate, transform and evaluate.

The workers share the step's files on the DirectRunner (in process or worker processes of this machine) and in
Beam's LOOPBACK environment (the work runs in the submitting process). Any other environment of a portable runner
(PROCESS, EXTERNAL, DOCKER: a Flink TaskManager's, Prism's or Spark's workers) and Dataflow run the work elsewhere:
then every path a worker opens must be a URI, under `--temp_location` (an s3:// or gs:// URI, required then):

- inputs: a folder the step read from the object store keeps its URI (KFP's launcher gives a pod the local copy
  /minio/BUCKET/KEY, /s3/BUCKET/KEY or /gcs/BUCKET/KEY of the artifact at minio://, s3:// or gs://BUCKET/KEY, so the
  URI follows from the path); a folder only this machine has (a local run) is copied there once.
- outputs and scratch: a folder under the run's scratch URI, which the step copies into its own staged output
  once the pipeline has finished (so a failed run leaves no artifact, as on one machine) and removes afterwards.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from slipway.core import beam, progress, storage
from slipway.core.errors import SlipwayError, option_name

# Beam's portable environments that run the work where the submitting step's files are.
SHARED_FILE_ENVIRONMENTS = {"LOOPBACK"}
# Runners whose default environment (no --environment_type) is LOOPBACK: Beam's Python PrismRunner.
LOOPBACK_BY_DEFAULT = {"prismrunner"}
# KFP's launcher puts an input artifact at /<scheme>/<bucket>/<key> (its local path for <scheme>://<bucket>/<key>).
KFP_LOCAL_PREFIXES = {"minio": "s3", "s3": "s3", "gcs": "gs"}
SCRATCH_SCHEMES = ("s3://", "gs://")


def workers_share_files(choice: beam.BeamChoice) -> bool:
    """Whether the runner's workers open the step's local paths (the DirectRunner, a LOOPBACK environment)."""
    if choice.is_direct:
        return True
    flags = beam.flag_values(choice.args)
    environment = flags.get("environment_type", "").upper()
    if environment:
        return environment in SHARED_FILE_ENVIRONMENTS
    return beam.runner_key(choice.runner) in LOOPBACK_BY_DEFAULT


def check(args: list[str], name: str = "") -> None:
    """A remote runner's arguments name the scratch URI its workers share: fails in one line otherwise (called when
    the arguments are parsed, before any step runs)."""
    choice = beam.choose("", args, None, cores=1)
    if not workers_share_files(choice):
        _scratch_location(choice, name)


def _scratch_location(choice: beam.BeamChoice, name: str = "") -> str:
    """The --temp_location of a runner whose workers run elsewhere; one line naming the input when it is missing
    or not an object-store URI."""
    name = name or option_name(beam.PARAMETER)
    location = beam.flag_values(choice.args).get("temp_location", "")
    if not location:
        raise SlipwayError(f"{name}: --runner={choice.runner} runs its workers where this step's files are not: "
                           "add --temp_location=s3://BUCKET/PATH (the scratch space the workers and the step share)")
    if not location.startswith(SCRATCH_SCHEMES):
        raise SlipwayError(f"{name}: --temp_location={location}: must be an object-store URI (s3://BUCKET/PATH or "
                           "gs://BUCKET/PATH) that the runner's workers can reach")
    return location


def uri_of_kfp_path(path: str | os.PathLike) -> str | None:
    """The object-store URI of a path KFP's launcher gave (/minio/b/k -> s3://b/k), or None for other paths."""
    parts = PurePosixPath(str(path)).parts
    if len(parts) > 3 and parts[0] == "/" and parts[1] in KFP_LOCAL_PREFIXES:
        return f"{KFP_LOCAL_PREFIXES[parts[1]]}://{'/'.join(parts[2:])}"
    return None


class WorkerPaths:
    """The paths one step hands Beam. Local (the paths themselves, scratch in a local temporary folder) or shared
    (URIs, scratch under the run's folder of --temp_location); use as a context manager, which removes the scratch.
    """

    def __init__(self, choice: beam.BeamChoice, step: str):
        self.shared = not workers_share_files(choice)
        self.step = step
        self._inputs: dict[str, str] = {}  # a local input folder -> the URI the workers read it by
        self._copies = 0
        if self.shared:
            location = _scratch_location(choice).rstrip("/")
            from slipway.core.beam import worker as beam_worker

            beam_worker.prepare()  # this process writes and reads the same URIs as the workers
            self.root = f"{location}/slipway-{step}-{uuid.uuid4().hex[:12]}"
            storage.ensure_filesystems(self.root)
        else:
            self.root = tempfile.mkdtemp(prefix=f"slipway-{step}-")

    def __enter__(self) -> WorkerPaths:
        return self

    def __exit__(self, *exc) -> None:
        if self.shared:
            storage.remove_tree(self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def folder(self, local: str | os.PathLike) -> str:
        """The path the workers read a whole input folder (examples, a model) by: on KFP the artifact's own URI."""
        local = str(local)
        if not self.shared or storage.is_remote(local):
            return storage.s3_uri(local)
        if local not in self._inputs:
            self._inputs[local] = uri_of_kfp_path(local) or self._copied(local)
        return self._inputs[local]

    def written(self, local: str | os.PathLike) -> str:
        """The path the workers read a folder this step wrote by (not yet in the object store, even under KFP's
        artifact paths: the launcher uploads outputs only when the step ends); copied to the scratch folder."""
        return self._copied(str(local)) if self.shared else str(local)

    def _copied(self, local: str) -> str:
        uri = f"{self.root}/inputs/{self._copies}-{Path(local).name}"
        self._copies += 1
        count = storage.copy_tree(local, uri)
        progress.say(f"{self.step} copied {local} ({count} files) to {uri} for the runner's workers")
        return uri

    def file(self, local: str | os.PathLike, folder: str | os.PathLike) -> str:
        """The path the workers read `local`, a file under the input folder `folder`, by."""
        if not self.shared:
            return str(local)
        relative = Path(local).relative_to(folder).as_posix()
        return storage.join(self.folder(folder), *relative.split("/"))

    def scratch(self, name: str) -> str:
        """A folder or file name (not yet made) for the pipeline to write into, removed with the rest at the end."""
        return storage.join(self.root, name)

    def output(self, local: str | os.PathLike, name: str) -> str:
        """Where the workers write what belongs in the step's local folder `local`: the folder itself when they
        share the step's files, else the scratch folder `name` (then `collect` copies it into `local`)."""
        return self.scratch(name) if self.shared else str(local)

    def collect(self, written: str, local: str | os.PathLike) -> int:
        """Copy what the pipeline wrote at `written` (from `output`) into `local`; the number of files copied."""
        if not self.shared:
            return 0
        return storage.copy_tree(written, str(local))


@contextlib.contextmanager
def runner_failures(choice: beam.BeamChoice, what: str) -> Iterator[None]:
    """A remote runner's failure (a killed worker, a lost TaskManager, a job the runner cancelled) as one line naming
    `what` (the step's input), the runner and its reason; the DirectRunner's errors pass through (the steps already
    name the module file's line for them)."""
    try:
        yield
    except SlipwayError:
        raise
    except Exception as exc:
        if choice.is_direct:
            raise
        raise SlipwayError(f"{what}: Beam {choice.runner} failed: {failure_reason(exc)}") from exc


def failure_reason(exc: BaseException) -> str:
    """The runner's own words: the first line of the error that says something, cut to 500 characters. A gRPC
    error is the job service gone (the runner's client talks to nothing else), whose first line says nothing.

    Args:
        exc: what the pipeline raised.

    Returns:
        One line.
    """
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"lost the job service ({getattr(code(), 'name', code())}: {details()})"
    if _is_connect_timeout(exc):  # a later pipeline of the step found no job service: its str() is empty
        return "lost the job service (no connection within --job_server_timeout)"
    for line in str(exc).splitlines():
        if line.strip():
            return " ".join(line.split())[:500]
    return type(exc).__name__


def _is_connect_timeout(exc: BaseException) -> bool:
    """Whether exc is gRPC's wait for a channel ending unanswered (Beam's client waits so for the job service)."""
    try:
        import grpc
    except ImportError:  # no gRPC, no job service
        return False
    return isinstance(exc, grpc.FutureTimeoutError)


def open_read(path: str | os.PathLike):
    """A file a step or a Beam worker reads as bytes, by local path or object-store URI (s3:// and minio:// through
    tf.io.gfile, as the workers' other reads: tensorflow-io's filesystem, with the object store's settings from
    the environment). A pyarrow file: pyarrow's readers (CSV, Parquet, decompressing streams) take it as it is."""
    import pyarrow as pa

    if not storage.is_remote(path):
        return pa.OSFile(str(path), "rb")
    from slipway.core.beam import worker as beam_worker

    beam_worker.prepare()
    uri = storage.s3_uri(str(path))
    storage.ensure_filesystems(uri)
    import tensorflow as tf

    return pa.PythonFile(io.BufferedReader(_GFileReader(tf.io.gfile.GFile(uri, "rb")), buffer_size=1 << 20),
                         mode="r")


class _GFileReader(io.RawIOBase):
    """A tf.io.gfile file as a Python raw binary file (pyarrow wraps Python files, not GFile's own interface)."""

    def __init__(self, gfile):
        super().__init__()
        self._gfile = gfile

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._gfile.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            offset, whence = self._gfile.size() + offset, io.SEEK_SET
        elif whence == io.SEEK_CUR:
            offset, whence = self._gfile.tell() + offset, io.SEEK_SET
        self._gfile.seek(offset)
        return self._gfile.tell()

    def tell(self) -> int:
        return self._gfile.tell()

    def close(self) -> None:
        if not self.closed:
            self._gfile.close()
        super().close()
