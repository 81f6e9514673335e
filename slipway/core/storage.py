"""Paths that may be local or object-store URIs (s3:// through tensorflow-io's filesystem for tf.io.gfile).

Local paths use the standard library (no TensorFlow import); URIs use tf.io.gfile. S3/MinIO settings come from
the environment (S3_ENDPOINT, S3_USE_HTTPS, S3_VERIFY_SSL, AWS_REGION, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY),
which on a cluster are filled from a Kubernetes Secret, never from literal values.
"""

from __future__ import annotations

import contextlib
import glob as local_glob
import os
import re
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from slipway.core.errors import SlipwayError

FILESYSTEM_MODULES = {"s3": "tensorflow_io"}
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


OBJECT_STORE_SCHEMES = ("s3://", "minio://")  # minio:// is KFP's name for S3 objects at its configured endpoint


def is_remote(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def is_object_store(path: str | os.PathLike) -> bool:
    """An object-store URI this module reads (s3://, KFP's minio://); other schemes are not object stores."""
    return str(path).lower().startswith(OBJECT_STORE_SCHEMES)


def local_path(value: str | os.PathLike, what: str, object_stores: bool = False) -> Path:
    """An input read from the local file system (on a cluster, the step's mounted volume): a plain path or a
    file:///path URI. Any other URI fails naming its scheme, where Path() would fold foo://bar into foo:/bar and
    report that as a missing file. what: the input as the caller knows it (--data, data); object_stores: the caller
    also takes s3:// URIs (the error says so)."""
    text = str(value)
    match = _URI_SCHEME.match(text)
    if not match:
        return Path(text)
    scheme = match.group(1)
    if scheme.lower() == "file":
        parsed = urllib.parse.urlsplit(text)
        if parsed.netloc not in ("", "localhost"):
            raise SlipwayError(f"{what} {text}: a file URI names no host (file:///path)")
        return Path(urllib.parse.unquote(parsed.path))
    supported = "a local path, file:///path or s3://bucket/path" if object_stores else "a local path, or file:///path"
    raise SlipwayError(f"{what} {text}: unsupported scheme '{scheme}://' (supported: {supported})")


def ensure_filesystems(*paths: str | os.PathLike) -> None:
    """Register the tf.io.gfile filesystems the given URIs need (importing tensorflow_io adds s3://)."""
    for path in paths:
        scheme = str(path).split("://", 1)[0] if is_remote(path) else ""
        module = FILESYSTEM_MODULES.get(scheme)
        if module:
            try:
                __import__(module)
            except ImportError as exc:
                raise SlipwayError(f"{path}: the {scheme}:// filesystem needs {module} ({exc})") from exc


def join(base: str | os.PathLike, *parts: str) -> str:
    if is_remote(base):
        return "/".join([str(base).rstrip("/"), *parts])
    return str(Path(base, *parts))


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def read_text(path: str | os.PathLike) -> str:
    if not is_remote(path):
        return Path(path).read_text(encoding="utf-8")
    ensure_filesystems(path)
    with _gfile().GFile(str(path), "r") as f:
        return f.read()


def write_text(path: str | os.PathLike, text: str) -> None:
    if not is_remote(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
        return
    ensure_filesystems(path)
    with _gfile().GFile(str(path), "w") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """A whole file at once (on an object store: one object, there complete or not at all)."""
    if not is_remote(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
        return
    ensure_filesystems(path)
    with _gfile().GFile(str(path), "wb") as f:
        f.write(data)


def exists(path: str | os.PathLike) -> bool:
    if not is_remote(path):
        return Path(path).exists()
    ensure_filesystems(path)
    return _gfile().exists(str(path))


def glob(pattern: str) -> list[str]:
    if not is_remote(pattern):
        return sorted(local_glob.glob(pattern))
    ensure_filesystems(pattern)
    return sorted(_gfile().glob(pattern))


def makedirs(path: str | os.PathLike) -> None:
    if not is_remote(path):
        Path(path).mkdir(parents=True, exist_ok=True)
        return
    ensure_filesystems(path)
    _gfile().makedirs(str(path))


def remove_tree(path: str | os.PathLike) -> None:
    if not is_remote(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    ensure_filesystems(path)
    if _gfile().exists(str(path)):
        _gfile().rmtree(str(path))


def copy_tree(source: str, destination: str) -> int:
    """Copy every file under source to destination (either may be a URI); return the number of files."""
    ensure_filesystems(source, destination)
    gfile = _gfile()
    copied = 0
    for folder, _, files in gfile.walk(source):
        relative = folder[len(source.rstrip("/")):].lstrip("/")
        target = join(destination, relative) if relative else destination
        gfile.makedirs(target)
        for name in files:
            gfile.copy(join(folder, name), join(target, name), overwrite=True)
            copied += 1
    return copied


# Where KFP's launcher mounts an artifact's object-store URI inside the step's container (kfp.dsl's Artifact.path:
# gs://b/k is read and written at /gcs/b/k, minio:// and s3:// alike)
KFP_MOUNTS = {"/gcs/": "gs://", "/minio/": "minio://", "/s3/": "s3://"}


def shown_uri(path: str | os.PathLike) -> str:
    """What a report names for an artifact at `path`: its URI, as the KFP UI and `slipway lineage` show it, where
    the path is KFP's mount of one; a URI or a local path (kfp.local, `slipway run`) as it is."""
    text = str(path)
    for mount, scheme in KFP_MOUNTS.items():
        if text.startswith(mount):
            return scheme + text[len(mount):]
    return text


def s3_uri(uri: str) -> str:
    """KFP's minio://bucket/key URIs (its artifacts' URIs when the pipeline root is on MinIO) name S3 objects at the
    configured endpoint: s3://bucket/key, which tf.io.gfile reads through tensorflow-io."""
    return "s3://" + uri[len("minio://"):] if uri.startswith("minio://") else uri


def refusal(uri: str) -> str | None:
    """The object store's refusal of this process's credentials for uri's bucket, in one line, or None when it
    takes them, cannot be asked, or uri is not in an object store. tensorflow-io's S3 client reports a refused
    request (403: a wrong key or secret) as a missing object, so without this a wrong Secret reads as "no such
    file"; moto accepts any key, SeaweedFS (KFP 2.15+), MinIO and S3 do not. boto3 asks once, with the same
    settings from the environment."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    uri = s3_uri(uri)
    if not uri.startswith("s3://"):  # a local path has no bucket to ask about (it once asked for one named by it)
        return None
    bucket, _, key = uri[len("s3://"):].partition("/")
    endpoint = os.environ.get("S3_ENDPOINT", "")
    if endpoint and "://" not in endpoint:  # tensorflow-io also takes host:port, its scheme from S3_USE_HTTPS
        endpoint = ("http://" if os.environ.get("S3_USE_HTTPS") == "0" else "https://") + endpoint
    client = boto3.client("s3", endpoint_url=endpoint or None, region_name=os.environ.get("AWS_REGION") or None,
                          verify=os.environ.get("S3_VERIFY_SSL") != "0",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=10, read_timeout=30))
    try:
        client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (401, 403):
            return (f"the object store refused access ({error.get('Code') or status}: "
                    f"{' '.join(str(error.get('Message', '')).split())[:200]}); check the credentials in "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (on a cluster, the object-store Secret) and what "
                    "they may read")
        if error.get("Code") == "NoSuchBucket":
            return f"no bucket {bucket} in the object store"
    except BotoCoreError:  # unreachable or unconfigured: tensorflow-io's own answer stands
        return None
    return None


@contextlib.contextmanager
def local_copy(uri: str, what: str) -> Iterator[Path]:
    """A copy of the object-store file or folder at uri in a scratch folder (under TMPDIR), removed afterwards: for
    inputs read by libraries that take only local files. what: the input as the caller knows it (data)."""
    import tensorflow as tf

    source = s3_uri(uri)  # errors name the URI as the caller gave it
    ensure_filesystems(source)
    gfile = _gfile()
    scratch = Path(tempfile.mkdtemp(prefix="slipway-input-"))
    try:
        try:
            if not gfile.exists(source):
                raise SlipwayError(f"{what} {uri}: {refusal(source) or 'no such file or folder'}")
            target = scratch / source.rstrip("/").rsplit("/", 1)[-1]
            if gfile.isdir(source):
                copy_tree(source, str(target))
            else:
                gfile.copy(source, str(target))
        except tf.errors.OpError as exc:  # credentials, endpoint, bucket: the store's own words, one line
            raise SlipwayError(f"{what} {uri}: {' '.join(str(exc.message).split())}") from exc
        yield target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

