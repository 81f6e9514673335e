"""Cluster DNS for the single-node cluster: A records of every Service, as <name>.<namespace>.svc.cluster.local.

Pods resolve Service names (KFP's `ml-pipeline.kubeflow`, `minio-service.kubeflow`, a user's
`metadata-grpc-service.kubeflow:8080` lineage store) through the kubelet's clusterDNS. This answers those queries
over UDP from the API server's Service and Pod lists (refreshed every second, and at once when a pod's name under
a known headless Service is not known yet: a launcher may ask for a worker's name within a second of its start)
and NXDOMAIN for any other name: this machine reaches no DNS beyond its own. Standard library only.

Headless Services (clusterIP None) as Kubernetes' DNS specification has them: the Service's name answers with the
addresses of the pods it selects, and a pod with spec.hostname and spec.subdomain naming such a Service gets
<hostname>.<subdomain>.<namespace>.svc.cluster.local: the names in the MPI Operator's hostfile
(<job>-worker-0.<job>.<namespace>.svc), which the launcher's ssh and mpirun resolve.

    python3 dns.py --listen 10.244.0.1:53 --server https://10.244.0.1:6443 --ca ca.crt --cert admin.crt --key admin.key
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request

DOMAIN = "cluster.local"
TTL = 5
MISS_REFRESH_S = 0.25  # a miss older than this refreshes before answering NXDOMAIN
NOERROR, FORMERR, NXDOMAIN = 0, 1, 3
TYPE_A = 1


class Records:
    """name -> IPv4 addresses of every Service (headless ones too) and of pods named under a headless Service,
    refreshed from the API server."""

    def __init__(self, server: str, context: ssl.SSLContext):
        self.server, self.context = server, context
        self.names: dict[str, list[str]] = {}
        self.headless: set[str] = set()  # the names of headless Services, under which pods get names
        self.lock = threading.Lock()
        self.refreshing = threading.Lock()  # one refresh at a time: the refresher thread's or a miss's
        self.refreshed = 0.0  # time.monotonic() of the last refresh that succeeded

    def _items(self, what: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.server}/api/v1/{what}", context=self.context, timeout=5) as answer:
            return json.load(answer)["items"]

    def refresh(self) -> None:
        with self.refreshing:
            self._refresh()

    def _refresh(self) -> None:
        services, pods = self._items("services"), self._items("pods")
        live = [pod for pod in pods if pod.get("status", {}).get("podIP")
                and pod["status"].get("phase") in ("Pending", "Running")]
        names: dict[str, list[str]] = {}
        headless: set[str] = set()
        for service in services:
            meta, spec = service["metadata"], service["spec"]
            name = f"{meta['name']}.{meta['namespace']}.svc.{DOMAIN}"
            address = spec.get("clusterIP", "")
            if address and address != "None":
                names[name] = [address]
                continue
            headless.add(name)
            selector = spec.get("selector") or {}
            for pod in live:
                labels = pod["metadata"].get("labels") or {}
                if pod["metadata"]["namespace"] != meta["namespace"]:
                    continue
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    names.setdefault(name, []).append(pod["status"]["podIP"])
                if pod["spec"].get("subdomain") == meta["name"] and pod["spec"].get("hostname"):
                    host = f"{pod['spec']['hostname']}.{meta['name']}.{meta['namespace']}.svc.{DOMAIN}"
                    names[host] = [pod["status"]["podIP"]]
        with self.lock:
            self.names, self.headless, self.refreshed = names, headless, time.monotonic()

    def try_refresh(self) -> None:
        # Any failure (the API server restarting, a reply cut short, a list that does not parse) keeps the last
        # records and is retried: a refresher that died would freeze every name made after it (CI saw MPI workers'
        # names never appear)
        try:
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - see above
            print(f"dns: refresh failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def keep_fresh(self, stop: threading.Event | None = None) -> None:
        """Refresh every second until stop is set (never, in the server)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            self.try_refresh()
            stop.wait(1)

    def lookup(self, name: str) -> list[str] | None:
        with self.lock:
            found, age = self.names.get(name), time.monotonic() - self.refreshed
            # only there: every short name a pod asks for misses on its way down the search list
            pod_name = name.partition(".")[2] in self.headless
        if found is None and pod_name and age > MISS_REFRESH_S:
            self.try_refresh()
            with self.lock:
                found = self.names.get(name)
        return found


def parse_question(packet: bytes) -> tuple[str, int, int]:
    """The first question's name, type and the offset after it."""
    labels, offset = [], 12
    while True:
        length = packet[offset]
        if length == 0:
            offset += 1
            break
        if length & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(packet[offset + 1:offset + 1 + length].decode("ascii").lower())
        offset += 1 + length
    qtype, _ = struct.unpack("!HH", packet[offset:offset + 4])
    return ".".join(labels), qtype, offset + 4


def answer(packet: bytes, records: Records) -> bytes:
    """The reply to one query packet."""
    query_id, flags = struct.unpack("!HH", packet[:4])
    recursion_desired = flags & 0x0100
    try:
        name, qtype, end = parse_question(packet)
    except (ValueError, IndexError, struct.error):
        return struct.pack("!HHHHHH", query_id, 0x8000 | recursion_desired | FORMERR, 0, 0, 0, 0)
    question = packet[12:end]
    addresses = records.lookup(name)  # short names reach us expanded by the pods' search list
    # NXDOMAIN for every name we do not know (not REFUSED, which makes some resolvers stop walking the search list)
    rcode = NXDOMAIN if addresses is None else NOERROR
    found = addresses if addresses is not None and qtype == TYPE_A else []
    answers = b"".join(b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, 1, TTL, 4) + socket.inet_aton(address)
                       for address in found)
    header = struct.pack("!HHHHHH", query_id, 0x8400 | recursion_desired | rcode, 1, len(found), 0, 0)
    return header + question + answers


def serve(listen: str, records: Records) -> None:
    host, port = listen.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, int(port)))
    print(f"dns: answering for *.svc.{DOMAIN} on {listen}", flush=True)
    while True:
        packet, peer = sock.recvfrom(4096)
        if len(packet) >= 12:
            sock.sendto(answer(packet, records), peer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT (UDP)")
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    context = ssl.create_default_context(cafile=args.ca)
    context.load_cert_chain(args.cert, args.key)
    records = Records(args.server, context)
    records.refresh()
    threading.Thread(target=records.keep_fresh, daemon=True).start()
    serve(args.listen, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
