"""The single-node cluster's DNS (.ci/cluster/dns.py) answering real UDP queries, its records read from an HTTP server
on loopback that answers as the API server's /api/v1/services and /api/v1/pods do: the names pods ask for, a pod's
name under a headless Service the moment it exists, and a refresher that outlives replies it cannot read."""

from __future__ import annotations

import importlib.util
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DNS_PY = Path(__file__).resolve().parents[1] / ".ci" / "cluster" / "dns.py"


def load_dns():
    spec = importlib.util.spec_from_file_location("cluster_dns", DNS_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeLists:
    """What the API server lists, changed by the test; `broken` answers the next N lists with a cut-off body."""

    def __init__(self):
        self.services: list[dict] = []
        self.pods: list[dict] = []
        self.broken = 0
        self.lists = 0


def serve_lists(lists: FakeLists) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            lists.lists += 1
            items = lists.services if self.path.endswith("/services") else lists.pods
            body = json.dumps({"kind": "List", "items": items}).encode()
            if lists.broken:
                lists.broken -= 1
                body = body[: len(body) // 2]  # JSON that does not parse: what a reply cut short gives
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def service(name: str, cluster_ip: str = "None", selector: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "kubeflow"},
            "spec": {"clusterIP": cluster_ip, "selector": selector or {}}}


def pod(name: str, ip: str, labels: dict, hostname: str = "", subdomain: str = "", phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "namespace": "kubeflow", "labels": labels},
            "spec": {"hostname": hostname, "subdomain": subdomain}, "status": {"podIP": ip, "phase": phase}}


def query(port: int, name: str, qtype: int = 1) -> tuple[int, list[str]]:
    """(rcode, A addresses) of one query sent over UDP."""
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    packet = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(packet, ("127.0.0.1", port))
        reply = sock.recv(4096)
    query_id, flags, _, count, _, _ = struct.unpack("!HHHHHH", reply[:12])
    assert query_id == 7 and flags & 0x8000
    offset = 12 + len(question) + 4
    addresses = []
    for _ in range(count):  # each answer: a pointer to the question's name, type, class, TTL, length, address
        addresses.append(socket.inet_ntoa(reply[offset + 12:offset + 16]))
        offset += 16
    return flags & 0x000F, addresses


@pytest.fixture
def dns():
    module = load_dns()
    lists = FakeLists()
    api = serve_lists(lists)
    records = module.Records(f"http://127.0.0.1:{api.server_port}", None)
    records.refresh()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    threading.Thread(target=module.serve, args=(f"127.0.0.1:{port}", records), daemon=True).start()
    time.sleep(0.2)
    yield module, lists, records, port
    api.shutdown()


def test_services_headless_services_and_pods_under_them_are_answered_and_other_names_are_nxdomain(dns):
    module, lists, records, port = dns
    lists.services = [service("minio-service", "10.96.0.20"), service("job", selector={"role": "worker"})]
    lists.pods = [pod("job-worker-0", "10.244.0.7", {"role": "worker"}, "job-worker-0", "job"),
                  pod("job-worker-1", "10.244.0.8", {"role": "worker"}, "job-worker-1", "job"),
                  pod("old", "10.244.0.9", {"role": "worker"}, "old", "job", phase="Succeeded")]
    records.refresh()
    assert query(port, "minio-service.kubeflow.svc.cluster.local") == (0, ["10.96.0.20"])
    assert query(port, "MINIO-service.kubeflow.svc.cluster.local") == (0, ["10.96.0.20"])  # names are caseless
    assert query(port, "job.kubeflow.svc.cluster.local") == (0, ["10.244.0.7", "10.244.0.8"])
    assert query(port, "job-worker-1.job.kubeflow.svc.cluster.local") == (0, ["10.244.0.8"])
    # a pod that has ended has no name; nor has anything outside the cluster (NXDOMAIN, so resolvers walk on)
    assert query(port, "old.job.kubeflow.svc.cluster.local") == (module.NXDOMAIN, [])
    assert query(port, "minio-service.kubeflow.kubeflow.svc.cluster.local") == (module.NXDOMAIN, [])
    assert query(port, "pypi.org") == (module.NXDOMAIN, [])
    # a known name asked for another type: no error, no address
    assert query(port, "minio-service.kubeflow.svc.cluster.local", qtype=28) == (0, [])


def test_a_pod_name_under_a_headless_service_is_answered_as_soon_as_the_pod_exists(dns):
    """No refresher thread runs here: the miss itself reads the lists again (what a launcher asking for a worker a
    moment after the worker started needs); a miss on a search-list expansion does not."""
    module, lists, records, port = dns
    lists.services = [service("job")]
    records.refresh()
    time.sleep(module.MISS_REFRESH_S)
    lists.pods = [pod("job-worker-0", "10.244.0.7", {}, "job-worker-0", "job")]
    assert query(port, "job-worker-0.job.kubeflow.svc.cluster.local") == (0, ["10.244.0.7"])
    before = lists.lists
    time.sleep(module.MISS_REFRESH_S)
    assert query(port, "minio-service.kubeflow.kubeflow.svc.cluster.local") == (module.NXDOMAIN, [])
    assert lists.lists == before


def test_the_refresher_keeps_the_last_records_through_replies_it_cannot_read_and_catches_up(dns, capfd):
    module, lists, records, port = dns
    lists.services = [service("ml-pipeline", "10.96.0.10")]
    records.refresh()
    lists.broken = 3
    lists.services.append(service("new-service", "10.96.0.11"))
    stop = threading.Event()
    refresher = threading.Thread(target=records.keep_fresh, args=(stop,), daemon=True)
    refresher.start()
    try:
        deadline = time.monotonic() + 20
        while query(port, "new-service.kubeflow.svc.cluster.local")[1] != ["10.96.0.11"]:
            assert time.monotonic() < deadline, "the refresher never caught up after unreadable replies"
            assert query(port, "ml-pipeline.kubeflow.svc.cluster.local") == (0, ["10.96.0.10"])
            time.sleep(0.2)
    finally:  # a refresher left running would write its failures into later tests' stderr
        stop.set()
        refresher.join(timeout=10)
    assert not refresher.is_alive()
    assert "dns: refresh failed: JSONDecodeError" in capfd.readouterr().err
