"""Write a one-layer OCI image archive of static binaries, for the cluster's infrastructure images.

The pod sandbox (pause), KFP's driver and launcher and Argo's executor are single static Go or C programs; their
images need nothing else, and no registry can be pulled from here. This writes an OCI image layout as a tar
(`ctr images import` reads it) with fixed timestamps, so the same binaries always give the same digest.

    python3 oci_image.py OUT.tar NAME:TAG --entrypoint /pause -P --file /usr/bin/catatonit=/pause
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path


def layer(files: dict[str, Path]) -> bytes:
    """A gzipped tar of the files at their image paths (mode 0755, owned by root, mtime 0), with parent folders
    and /tmp."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({str(Path(target).parent).lstrip("/") for target in files} - {""})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        scratch = tarfile.TarInfo("tmp")  # programs that write temporary files find the usual place
        scratch.type, scratch.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(scratch)
        for target, source in sorted(files.items()):
            data = source.read_bytes()
            info = tarfile.TarInfo(target.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as compressed:
        compressed.write(raw.getvalue())
    return out.getvalue()


def blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def write(out: Path, name: str, files: dict[str, Path], entrypoint: list[str]) -> str:
    """Write the archive; returns the manifest digest."""
    compressed = layer(files)
    uncompressed = gzip.decompress(compressed)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin:/usr/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(uncompressed).hexdigest()}"]},
    }, sort_keys=True).encode()
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        layer_digest = blob(tar, compressed)
        config_digest = blob(tar, config)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                       "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest,
                        "size": len(compressed)}],
        }, sort_keys=True).encode()
        manifest_digest = blob(tar, manifest)
        index = json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": name,
                                                   "io.containerd.image.name": name}}]}).encode()
        for entry, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(entry)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    partial.replace(out)
    return manifest_digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("name", help="the image reference, e.g. slipway.local/pause:catatonit")
    parser.add_argument("--file", action="append", required=True, metavar="SOURCE=TARGET",
                        help="a file and its path in the image (repeat)")
    parser.add_argument("--entrypoint", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args(argv)
    files = {}
    for spec in args.file:
        source, _, target = spec.partition("=")
        if not target or not Path(source).is_file():
            print(f"oci_image: --file {spec}: expected an existing SOURCE=TARGET", file=sys.stderr)
            return 2
        files[target] = Path(source)
    print(write(args.out, args.name, files, args.entrypoint))
    return 0


if __name__ == "__main__":
    sys.exit(main())
