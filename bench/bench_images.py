"""Image build times and sizes: `slipway images build` cold and warm, and after a one-line code change.

    .venv/bin/python bench/bench_images.py [--cold] [--base-image debian]

Measures, on a copy of this checkout (so the repository is never edited):
- warm: every image again with nothing changed (all layers cached);
- code change: one comment added to a module of slipway, then the runtime, trainer and serving builds — the
  Python environments must not be rebuilt (target: < 60 s for the three together);
- cold (--cold): the environment images and their cache archives removed first, as on a fresh machine whose
  uv and Horovod wheel caches are warm (the CI case after .ci/setup); minutes.
Sizes are the images' uncompressed sizes as podman reports them (target: runtime < 3 GB).
Prints a markdown table (paste it into bench/RESULTS.md) with each figure against its target.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slipway.images import LOCAL_PREFIX, cache_dir, podman  # noqa: E402

WARM_TARGET_S = 60.0
RUNTIME_SIZE_TARGET = 3e9


def copy_checkout(target: Path) -> None:
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True)
    for name in files.stdout.split():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)


def build(context: Path, base: str) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "slipway.cli", "images", "build", "--registry", "bench.invalid/x",
                             "--no-push", "--base-image", base, "--context", str(context)],
                            capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"bench: build failed: {result.stderr.strip().splitlines()[-1]}")
    return time.monotonic() - started, result.stderr


def stage_lines(stderr: str) -> str:
    return "; ".join(" ".join(line.split()[1:5]) for line in stderr.splitlines() if line.startswith("images: ")
                     and not line.startswith("images: total"))


def drop_environments() -> None:
    for line in podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if line.startswith(f"{LOCAL_PREFIX}/") and "-environment:" in line:
            podman("rmi", "--force", line, check=False)
    for archive in cache_dir().glob("*-environment-*.tar"):
        archive.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="also measure a build without environment images")
    parser.add_argument("--base-image", default="debian")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="slipway-bench-images-") as folder:
        context = Path(folder)
        copy_checkout(context)
        if args.cold:
            drop_environments()
            seconds, stderr = build(context, args.base_image)
            rows.append(("cold build, all three (caches of downloads and the Horovod wheel warm)", seconds, "",
                         stage_lines(stderr)))
        seconds, stderr = build(context, args.base_image)  # makes sure everything is cached for what follows
        seconds, stderr = build(context, args.base_image)
        rows.append(("warm build, nothing changed", seconds, "", stage_lines(stderr)))
        module = context / "slipway" / "core" / "errors.py"
        module.write_text(module.read_text() + "\n# bench: a code change\n")
        seconds, stderr = build(context, args.base_image)
        verdict = "meets" if seconds < WARM_TARGET_S else "misses"
        rows.append(("rebuild after a code change, all three", seconds, f"{verdict} target < 60 s",
                     stage_lines(stderr)))
    print("| measure | value | note |\n| --- | ---: | --- |")
    for label, seconds, note, stages in rows:
        print(f"| {label} | {seconds:.0f} s | {note} {stages} |")
    for name in ("runtime", "trainer", "serving"):
        size = int(podman("image", "inspect", "--format", "{{.Size}}",
                          f"{LOCAL_PREFIX}/slipway-{name}:0.1.0").stdout.strip())
        note = ""
        if name == "runtime":
            note = "meets target < 3 GB" if size < RUNTIME_SIZE_TARGET else "misses target < 3 GB"
        print(f"| {name} image size | {size / 1e9:.2f} GB | {note} |")


if __name__ == "__main__":
    main()
