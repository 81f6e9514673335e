"""`slipway serve` and `slipway predict`, and the wait behind `slipway run --keep-serving`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from slipway.core import lifecycle
from slipway.core.errors import SlipwayError

DEFAULT_PORT = 8080  # KServe's default HTTP port


def add_serve_parser(commands) -> None:
    serve = commands.add_parser(
        "serve", help="serve a model folder (TF Serving layout) or a run's pushed model on 127.0.0.1 until Ctrl-C")
    serve.add_argument("model_base", nargs="?", default="",
                       help="model folder holding numeric versions (MODEL/1/saved_model.pb ...); default: the model "
                            "the run in --workdir pushed")
    serve.add_argument("--workdir", default="out", help="run folder whose summary.json names the model (default: out)")
    serve.add_argument("--name", default="", help="model name in the URL (default: the run's, or the folder's name)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--poll-seconds", type=float, default=1.0, help="how often new versions are looked for")
    serve.add_argument("--workers", type=int, default=1,
                       help="server processes sharing the port, each with the model loaded (default 1; one per core "
                            "answers the most requests a second)")
    serve.add_argument("--log-payloads", default="", metavar="DEST",
                       help="log every answered row (its inputs, the answer, the model version, the time) as "
                            "Parquet files under DEST, a folder or s3:// prefix, for `slipway monitor` (default: "
                            "off; a failing store drops rows, never requests)")
    serve.add_argument("--stop", action="store_true", help="stop the server kept running for this model instead")


def add_predict_parser(commands) -> None:
    predict = commands.add_parser("predict", help="send rows of a CSV or JSON file to a served model, print answers")
    predict.add_argument("url", help="server URL (http://127.0.0.1:8080) or the model's /v1/models/NAME URL")
    predict.add_argument("rows", help="CSV with a header line, a JSON array of objects, {\"instances\": [...]}, "
                                      "or JSON lines; columns the model does not read (the label) are ignored")
    predict.add_argument("--name", default="", help="model name (default: the server's only model)")
    predict.add_argument("--limit", type=int, default=0, help="send only the first N rows")
    predict.add_argument("--json", action="store_true", help="print the raw V1 response")
    predict.add_argument("--ids", action="store_true",
                         help="show class ids (0, 1, ...), not the class names the model was trained with")


def _run_target(args) -> tuple[str, str]:
    """(model base, name) from the arguments, or from the run in --workdir."""
    from slipway.serving.layout import model_name_for

    if args.model_base:
        base = args.model_base if "://" in args.model_base else str(Path(args.model_base).resolve())
        return base, args.name or model_name_for(base)
    summary_path = Path(args.workdir) / "summary.json"
    if not summary_path.exists():
        raise SlipwayError(f"serve: give a model folder, or --workdir of a run ({summary_path} not found)")
    deployment = json.loads(summary_path.read_text()).get("deployment") or {}
    if not deployment.get("model_version"):
        why = deployment.get("reason", "no deploy step")
        raise SlipwayError(f"serve: the run in {args.workdir} pushed no model ({why})")
    return deployment["model_base"], args.name or deployment["model_name"]


def serve_command(args) -> int:
    from slipway.serving import layout, process

    base, name = _run_target(args)
    state = layout.server_state_file(base)
    running = process.read_state(state) if state else None
    if args.stop:
        if running is None:
            raise SlipwayError(f"serve --stop: no running server for {base}")
        running.stop()
        print(f"stopped the server at {running.url} (pid {running.pid})")
        return 0
    layout.check_model_name(name)
    if running is not None:
        raise SlipwayError(f"serve: {base} is already served at {running.url} (pid {running.pid}); "
                           "`slipway serve --stop` stops it")
    versions = layout.require_versions(base)
    log_file = f"{base.rstrip('/')}.server.log" if state else None
    with _stop_signals_interrupt():
        server = None
        try:
            server = process.start_server(base, name, port=args.port, host=args.host,
                                          poll_seconds=args.poll_seconds, log_file=log_file, state_file=state,
                                          workers=args.workers, log_payloads=_payload_dest(args.log_payloads))
            print(f"serving {name} version {versions[-1]} at {server.url} (Ctrl-C stops it; new versions pushed "
                  f"to {base} are picked up)", flush=True)
            if args.log_payloads:
                print(f"  logging every answered row under {args.log_payloads}", flush=True)
            print(f"  curl -s {server.url}/v1/models/{name}:predict -d '{{\"signature_name\": \"serving_raw\", "
                  f"\"instances\": [...]}}'", flush=True)
            _wait_while_alive(server)
        except KeyboardInterrupt:
            if server is not None:
                server.stop()
                print(f"\nstopped the server at {server.url}", flush=True)
    return 0


def _payload_dest(dest: str) -> str:
    """--log-payloads as the server takes it: an absolute folder (the server's working folder is not ours), or the
    object store URI as given."""
    if not dest or "://" in dest:
        return dest
    path = Path(dest).resolve()
    if path.exists() and not path.is_dir():
        raise SlipwayError(f"serve --log-payloads {dest}: a file, not a folder")
    return str(path)


def serve_until_interrupted(deployment: dict) -> None:
    """`slipway run --keep-serving`: the deploy step left the server running; hold it until Ctrl-C."""
    from slipway.serving import process

    state = deployment.get("server_state_file")
    server = process.read_state(state) if state else None
    if server is None:
        print("keep-serving: no server is running for this run", file=sys.stderr)
        return
    print(f"serving {deployment['model_name']} at {server.url} until Ctrl-C", flush=True)
    with _stop_signals_interrupt():
        try:
            _wait_while_alive(server)
        except KeyboardInterrupt:
            server.stop()
            print(f"\nstopped the server at {server.url}", flush=True)


def _stop_signals_interrupt():
    """Ctrl-C and SIGTERM (a supervisor's stop) stop the server, also where SIGINT was inherited as ignored."""
    return lifecycle.raise_on_signals(lambda signum: KeyboardInterrupt())


def _wait_while_alive(server) -> None:
    while server.alive():
        time.sleep(0.5)
    print(f"the server at {server.url} exited", file=sys.stderr)


def predict_command(args) -> int:
    from slipway.serving import client

    name = args.name or _only_model(args.url)
    rows = client.read_rows(args.rows)
    if args.limit > 0:
        rows = rows[: args.limit]
    meta = client.metadata(args.url, name)
    inputs = client.signature_inputs(meta, client.RAW_SIGNATURE)
    instances = client.rows_to_instances(rows, inputs, source=f"rows {args.rows}")
    predictions, version = client.predict(args.url, name, instances, signature=client.RAW_SIGNATURE)
    if args.json:
        print(json.dumps({"predictions": predictions}, indent=2))
        return 0
    print(f"# {name} version {version or '?'}: {len(predictions)} rows")
    classes = [] if args.ids else client.class_names(meta)
    for index, prediction in enumerate(predictions, 1):
        print(f"{index}\t{client.shown_prediction(prediction, classes)}")
    return 0


def _only_model(url: str) -> str:
    """The name of the one model a KServe server serves (GET /v1/models); TF Serving has no such list."""
    from slipway.serving import client

    if "/v1/models/" in url:
        return url.split("/v1/models/", 1)[1].split(":")[0].strip("/")
    try:
        models = client.list_models(url)
    except client.PredictError as exc:
        raise SlipwayError(f"predict: give --name (listing the server's models failed: {exc})") from None
    if len(models) != 1:
        raise SlipwayError(f"predict: give --name (the server has {len(models)} models: {', '.join(models)})")
    return models[0]
