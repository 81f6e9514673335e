"""`slipway images build`: build the runtime, trainer and serving images with podman, tag them by version, push
them to a registry and record the pushed digests in images/digests.json, which `slipway compile` reads.

Each image is two builds. The environment (`--target environment`: the base, Debian packages and the Python
environment from a lock file) is keyed by the content of what it is made from (Dockerfile, lock files, base image
id) and saved to $SLIPWAY_CACHE/images/ once built, so a machine with an empty image store loads it instead of
building it again. The image itself is `FROM` that environment plus the code (seconds). The trainer is `FROM` the
runtime just built. Each stage prints its seconds; the full build log of a failed stage is kept and named.

Build-time extras never land in a layer or the image config: a CA bundle (a TLS-intercepting proxy's certificate,
from --ca-bundle or $SSL_CERT_FILE) goes in as the build secret `ca`, and the host's uv and wheel caches as
build volumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from slipway import __version__
from slipway.core.artifacts import atomic_write_text
from slipway.core.errors import SlipwayError
from slipway.core.images import DIGESTS_FILE, IMAGE_NAMES, read_digests, repository_name

ROOT = Path(__file__).resolve().parent.parent
CONTAINERS_CONF = ROOT / "images" / "containers.conf"
BASE_SCRIPT = ROOT / "images" / "base.sh"
DEBIAN_BASE = "debian"  # --base-image debian: the Debian-archive base made by images/base.sh
LOCAL_PREFIX = "localhost/slipway"


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    dockerfile: str
    inputs: tuple[str, ...]  # files the environment stage copies, besides the Dockerfile
    from_runtime: bool = False  # FROM the runtime image (no environment stage of its own)


RECIPES = {
    "runtime": ImageRecipe("runtime", "images/runtime/Dockerfile",
                           ("requirements.lock", "images/runtime/requirements.lock", ".ci/horovod-wheel",
                            "images/runtime/prune.txt", "images/runtime/prune.sh")),
    "trainer": ImageRecipe("trainer", "images/trainer/Dockerfile", (), from_runtime=True),
    "serving": ImageRecipe("serving", "images/serving/Dockerfile",
                           ("requirements.lock", "images/serving/requirements.lock")),
}


@dataclass
class BuildOptions:
    registry: str
    images: tuple[str, ...] = IMAGE_NAMES
    base_image: str = ""  # "" = each Dockerfile's default (the official image by digest); "debian"; or an image
    digests_file: Path = DIGESTS_FILE
    push: bool = True
    ca_bundle: str = ""
    tls_verify: bool | None = None  # None: off for a loopback registry only
    log_dir: Path | None = None
    context: Path = ROOT  # the checkout to build from


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def podman(*args: str, log: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run podman; with `log`, append its output there instead of capturing it."""
    if shutil.which("podman") is None:
        raise SlipwayError("images: podman is not installed (apt-get install podman buildah skopeo)")
    if log is None:
        result = subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env())
    else:
        with open(log, "a") as out:
            out.write(f"$ podman {' '.join(args)}\n")
            out.flush()
            result = subprocess.run(["podman", *args], stdout=out, stderr=subprocess.STDOUT, text=True,
                                    env=podman_env())
    if check and result.returncode != 0:
        # Only this command's part of the log: an image's log holds its earlier (successful) builds too.
        detail = _first_error(log.read_text().rsplit("\n$ podman ", 1)[-1] if log else (result.stderr or result.stdout))
        where = f" (full log: {log})" if log else ""
        raise SlipwayError(f"images: podman {args[0]} failed: {detail}{where}")
    return result


def _first_error(output: str) -> str:
    """The line that says what went wrong: uv's/pip's/apt's own `error:` line, else the last non-empty one."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        lowered = line.lower()
        if lowered.startswith(("error:", "e: ")) or "hash mismatch" in lowered or "does not match" in lowered:
            return line[:400]
    return lines[-1][:400] if lines else "no output"


def content_key(paths: list[Path], extra: list[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for value in extra:
        digest.update(value.encode() + b"\0")
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("SLIPWAY_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "slipway")
    return Path(base).expanduser() / "images"


def image_id(reference: str) -> str:
    result = podman("image", "inspect", "--format", "{{.Id}}", reference, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def resolve_base(base_image: str, log: Path) -> str:
    """The base image reference to build from; "debian" makes (or loads) the Debian-archive base."""
    if base_image != DEBIAN_BASE:
        return base_image
    env = podman_env()
    result = subprocess.run(["bash", str(BASE_SCRIPT)], capture_output=True, text=True, env=env)
    with open(log, "a") as out:
        out.write(result.stderr)
    if result.returncode != 0:
        raise SlipwayError(f"images: the Debian-archive base failed: {_first_error(result.stderr)} (log: {log})")
    return result.stdout.strip().splitlines()[-1]


def build_volumes() -> list[str]:
    """The host's download and wheel caches, mounted into RUN steps so a rebuild fetches and compiles nothing."""
    volumes = []
    uv_cache = os.environ.get("UV_CACHE_DIR") or os.path.expanduser("~/.cache/uv")
    wheels = cache_dir().parent / "wheels"
    for host, target in ((uv_cache, "/root/.cache/uv"), (str(wheels), "/root/.cache/slipway/wheels")):
        Path(host).mkdir(parents=True, exist_ok=True)
        volumes += ["-v", f"{host}:{target}"]
    return volumes


def ca_secret(ca_bundle: str) -> list[str]:
    bundle = ca_bundle or os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE") or ""
    if not bundle:
        return []
    if not os.path.isfile(bundle):
        raise SlipwayError(f"images: CA bundle {bundle} does not exist")
    return ["--secret", f"id=ca,src={bundle}"]


def git_revision() -> str:
    result = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "unknown"


class Builder:
    """Builds the images of one `slipway images build` in order, printing each stage's seconds."""

    def __init__(self, options: BuildOptions):
        self.options = options
        self.root = options.context
        self.log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="slipway-images-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.common = ["--network=host", "--layers", *ca_secret(options.ca_bundle), *build_volumes()]
        self.built: dict[str, str] = {}  # name -> local tag
        self.times: list[tuple[str, float, str]] = []

    def stage(self, label: str, how: str, started: float) -> None:
        seconds = time.monotonic() - started
        self.times.append((label, seconds, how))
        print(f"images: {label:<24} {seconds:7.1f} s  {how}", file=sys.stderr, flush=True)

    def build_args(self, recipe: ImageRecipe, base: str) -> list[str]:
        args = []
        if base:
            args += ["--build-arg", f"BASE_IMAGE={base}"]
        if recipe.from_runtime:
            args += ["--build-arg", f"RUNTIME_IMAGE={self.built['runtime']}"]
        return args

    def environment(self, recipe: ImageRecipe, base: str, log: Path) -> str:
        """The environment stage's image: present, loaded from the cache, or built (then saved to the cache)."""
        started = time.monotonic()
        files = [self.root / recipe.dockerfile, *(self.root / name for name in recipe.inputs)]
        base_id = image_id(base) if base else ""
        key = content_key(files, [base or "default-base", base_id])
        tag = f"{LOCAL_PREFIX}/{recipe.name}-environment:{key}"
        archive = cache_dir() / f"{recipe.name}-environment-{key}.tar"
        if image_id(tag):
            self.stage(f"{recipe.name} environment", "present", started)
            return tag
        if archive.exists():
            podman("load", "--quiet", "--input", str(archive), log=log)
            self.stage(f"{recipe.name} environment", f"loaded from {archive.name}", started)
            return tag
        podman("build", *self.common, *self.build_args(recipe, base), "--target", "environment",
               "--label", f"slipway.environment.key={key}", "-f", str(self.root / recipe.dockerfile), "-t", tag,
               str(self.root), log=log)
        self.stage(f"{recipe.name} environment", "built", started)
        started = time.monotonic()
        archive.parent.mkdir(parents=True, exist_ok=True)
        # Gigabytes each: the stale archives go before this one is written (one copy on disk at a time).
        for stale in archive.parent.glob(f"{recipe.name}-environment-*.tar*"):
            stale.unlink()
        partial = archive.with_suffix(".tar.partial")
        podman("save", "--quiet", "--format", "docker-archive", "--output", str(partial), tag, log=log)
        partial.replace(archive)
        self.stage(f"{recipe.name} environment", f"saved to the cache ({archive.stat().st_size >> 20} MiB)",
                   started)
        return tag

    def build(self, name: str, base: str) -> str:
        recipe = RECIPES[name]
        log = self.log_dir / f"{name}.log"
        log.write_text("")
        args = self.build_args(recipe, base)
        if not recipe.from_runtime:
            args += ["--build-arg", f"ENVIRONMENT={self.environment(recipe, base, log)}"]
        started = time.monotonic()
        local = f"{LOCAL_PREFIX}/slipway-{name}:{__version__}"
        labels = {"org.opencontainers.image.version": __version__,
                  "org.opencontainers.image.revision": git_revision(),
                  "org.opencontainers.image.title": f"slipway-{name}"}
        podman("build", *self.common, *args, "--target", name,
               *(item for key, value in labels.items() for item in ("--label", f"{key}={value}")),
               "-f", str(self.root / recipe.dockerfile), "-t", local, str(self.root), log=log)
        self.stage(name, "built", started)
        self.built[name] = local
        return local

    def push(self, name: str) -> dict:
        started = time.monotonic()
        target = f"{repository_name(self.options.registry, name)}:{__version__}"
        podman("tag", self.built[name], target)
        digest_file = self.log_dir / f"{name}.digest"
        tls = self.options.tls_verify
        if tls is None:
            tls = not is_loopback(self.options.registry)
        podman("push", "--quiet", f"--tls-verify={str(tls).lower()}", "--digestfile", str(digest_file), target,
               log=self.log_dir / f"{name}.log")
        digest = digest_file.read_text().strip()
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise SlipwayError(f"images: push of {target} gave no digest ({digest!r})")
        self.stage(f"{name} push", f"{target}@{digest}", started)
        size = podman("image", "inspect", "--format", "{{.Size}}", self.built[name]).stdout.strip()
        return {"image": repository_name(self.options.registry, name), "tag": __version__, "digest": digest,
                "size_bytes": int(size or 0), "compressed_bytes": self.pushed_size(target, digest, tls),
                "revision": git_revision()}

    def pushed_size(self, target: str, digest: str, tls: bool) -> int:
        """What a node pulls: the pushed manifest's layers and config, compressed."""
        repository = target.rsplit(":", 1)[0]
        result = subprocess.run(["skopeo", "inspect", "--raw", f"--tls-verify={str(tls).lower()}",
                                 f"docker://{repository}@{digest}"], capture_output=True, text=True)
        if result.returncode != 0:
            return 0
        manifest = json.loads(result.stdout)
        return sum(layer.get("size", 0) for layer in manifest.get("layers", [])) + \
            manifest.get("config", {}).get("size", 0)


def is_loopback(registry: str) -> bool:
    """A registry (or image reference) on this machine: plain HTTP, so TLS verification is off for it only."""
    host = registry.split("/", 1)[0].rsplit(":", 1)[0]
    return host in ("localhost", "127.0.0.1", "[::1]") or host.startswith("127.")


def build_images(options: BuildOptions) -> dict:
    """Build (and push) the chosen images; return the digests record written (or, without push, local tags)."""
    unknown = [name for name in options.images if name not in RECIPES]
    if unknown:
        raise SlipwayError(f"images: unknown image {unknown[0]!r} (choose from {', '.join(RECIPES)})")
    names = [name for name in IMAGE_NAMES if name in options.images]
    builder = Builder(options)
    started = time.monotonic()
    base = resolve_base(options.base_image, builder.log_dir / "base.log")
    builder.stage("base", base or "the Dockerfiles' default", started)
    if "trainer" in names and "runtime" not in names:
        names.insert(0, "runtime")  # the trainer is FROM the runtime just built
    for name in names:
        builder.build(name, base)
    if not options.push:
        return {name: {"local": tag} for name, tag in builder.built.items()}
    record = read_digests(options.digests_file)
    for name in names:
        record[name] = builder.push(name)
    atomic_write_text(options.digests_file, json.dumps(record, indent=2, sort_keys=True) + "\n")
    total = sum(seconds for _, seconds, _ in builder.times)
    print(f"images: total {total:.1f} s; digests written to {options.digests_file}", file=sys.stderr)
    return record


def add_images_parser(commands) -> None:
    images = commands.add_parser("images", help="build, push and pin the container images")
    actions = images.add_subparsers(dest="images_command", required=True)
    build = actions.add_parser("build", help="build the images with podman, push them, write images/digests.json")
    build.add_argument("--registry", required=True,
                       help="where to push, e.g. ghcr.io/slipway-ml or 127.0.0.1:5000/slipway")
    build.add_argument("--images", default=",".join(IMAGE_NAMES),
                       help=f"comma-separated subset of {','.join(IMAGE_NAMES)} (default: all)")
    build.add_argument("--base-image", default="",
                       help="base image (default: the official python slim image by digest, as in the "
                            "Dockerfiles); `debian` makes one from the Debian archive (images/base.sh)")
    build.add_argument("--digests-file", default=str(DIGESTS_FILE), help="where to record the pushed digests")
    build.add_argument("--no-push", action="store_true", help="build and tag only")
    build.add_argument("--ca-bundle", default="", help="CA bundle for pip/uv at build time (default: $SSL_CERT_FILE)")
    build.add_argument("--log-dir", default="", help="keep the build logs here (default: a temp folder)")
    build.add_argument("--context", default=str(ROOT), help="the checkout to build from (default: this one)")


def images_command(args) -> int:
    options = BuildOptions(
        registry=args.registry.rstrip("/"), images=tuple(filter(None, args.images.split(","))),
        base_image=args.base_image, digests_file=Path(args.digests_file).resolve(), push=not args.no_push,
        ca_bundle=args.ca_bundle, log_dir=Path(args.log_dir).resolve() if args.log_dir else None,
        context=Path(args.context).resolve())
    record = build_images(options)
    for name, entry in record.items():
        if name in options.images:
            print(f"{name}: {entry.get('local') or entry['image'] + '@' + entry['digest']}")
    return 0
