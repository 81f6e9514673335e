"""An ML Metadata gRPC server backed by MLMD's own store, for places where Kubeflow runs metadata_store_server.

Kubeflow runs MLMD's C++ `metadata_store_server`, which no package registry ships. This serves the same protocol,
`ml_metadata.MetadataStoreService` (every RPC of MLMD's own service descriptor), and answers each call with MLMD's
store from the ml-metadata wheel on a SQLite file, so KFP's driver and launcher (Go, gRPC) and Slipway's components
talk to real MLMD over real gRPC. Calls are served one at a time: the store is one SQLite connection.

    python -m slipway.core.lineage.mlmd_server --sqlite PATH [--address HOST:PORT]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any


def start(sqlite_path: str | os.PathLike, address: str = "127.0.0.1:0") -> tuple[Any, int]:
    """Start serving on address (port 0: a free one).

    Returns:
        The started grpc.Server and the port it listens on.
    """
    from concurrent import futures

    import grpc
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(sqlite_path)
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    store = metadata_store.MetadataStore(config)
    service = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]
    lock = threading.Lock()
    handlers = {method.name: _handler(method, store, lock, metadata_store_service_pb2, grpc)
                for method in service.methods}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service.full_name, handlers)])
    port = server.add_insecure_port(address)
    if not port:
        raise OSError(f"mlmd_server: cannot listen on {address}")
    server.start()
    return server, port


def _handler(method: Any, store: Any, lock: threading.Lock, messages: Any, grpc: Any) -> Any:
    from ml_metadata import errors

    request_class = getattr(messages, method.input_type.name)
    response_class = getattr(messages, method.output_type.name)

    def handle(request: Any, context: Any) -> Any:
        response = response_class()
        try:
            with lock:
                store._call(method.name, request, response)  # MLMD's own dispatch by method name
        except errors.StatusError as exc:
            context.abort(next(code for code in grpc.StatusCode if code.value[0] == exc.error_code), str(exc))
        return response

    return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=request_class.FromString,
                                               response_serializer=response_class.SerializeToString)


@contextlib.contextmanager
def running(sqlite_path: str | os.PathLike, address: str = "127.0.0.1:0") -> Iterator[str]:
    """Serve while the block runs; yields "grpc://HOST:PORT"."""
    server, port = start(sqlite_path, address)
    try:
        yield f"grpc://{address.rsplit(':', 1)[0]}:{port}"
    finally:
        server.stop(grace=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite", required=True, help="the SQLite file of the store (created if missing)")
    parser.add_argument("--address", default="127.0.0.1:8080", help="HOST:PORT to listen on (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        server, port = start(args.sqlite, args.address)
    except OSError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"mlmd_server: serving {args.sqlite} on {args.address.rsplit(':', 1)[0]}:{port}", flush=True)
    # SIGTERM's default action ends the process: every answered call is already committed to SQLite.
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
