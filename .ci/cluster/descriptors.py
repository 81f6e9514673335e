"""Write a FileDescriptorSet of KFP's pipeline spec and Kubernetes platform protos, taken from the published wheels.

KFP 2.14.3's driver and launcher need the Go code of its pipeline-spec and kubernetes-platform protos at that
release, but the Go modules carrying them (github.com/kubeflow/pipelines/api, .../kubernetes_platform) are on the
Go proxy only at versions from 2024 and January 2025. The same release's Python wheels on PyPI (kfp-pipeline-spec
and kfp-kubernetes 2.14.3) embed each proto's compiled FileDescriptorProto; this reads those bytes out of the
generated *_pb2.py files (without importing them: they require a newer protobuf runtime than ours) and writes
them, with what they import (well-known types, googleapis' common protos, from this Python's own packages), as
one FileDescriptorSet for `protoc --descriptor_set_in`.

    python descriptors.py OUT.pb WHEEL_FOLDER...
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2


def serialized_files(pb2: Path) -> list[bytes]:
    """The FileDescriptorProto bytes a generated *_pb2.py passes to AddSerializedFile."""
    found = []
    for node in ast.walk(ast.parse(pb2.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bytes)):
            found.append(node.args[0].value)
    return found


def descriptor_set(folders: list[Path]) -> descriptor_pb2.FileDescriptorSet:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for folder in folders:
        for pb2 in sorted(folder.rglob("*_pb2.py")):
            for data in serialized_files(pb2):
                proto = descriptor_pb2.FileDescriptorProto.FromString(data)
                files[proto.name] = proto
    missing = sorted({dep for proto in files.values() for dep in proto.dependency} - set(files))
    while missing:  # imports from outside the wheels: the well-known types and googleapis' common protos
        name = missing.pop()
        try:
            module = importlib.import_module(name.removesuffix(".proto").replace("/", ".") + "_pb2")
        except ImportError:
            raise SystemExit(f"descriptors: {name} is imported but in no wheel given nor importable here") from None
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        files[name] = proto
        missing = sorted(set(missing) | (set(proto.dependency) - set(files)))
    ordered, done = [], set()

    def add(name: str) -> None:  # dependencies first, as protoc expects
        if name in done:
            return
        for dep in files[name].dependency:
            add(dep)
        done.add(name)
        ordered.append(files[name])

    for name in sorted(files):
        add(name)
    return descriptor_pb2.FileDescriptorSet(file=ordered)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    result = descriptor_set([Path(folder) for folder in argv[1:]])
    Path(argv[0]).write_bytes(result.SerializeToString())
    for proto in result.file:
        print(f"{proto.name}\t{proto.options.go_package}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
