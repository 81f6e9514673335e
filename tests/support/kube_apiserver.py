"""A real Kubernetes API server (etcd 3.5 + kube-apiserver v1.32 on 127.0.0.1) for tests: the apiserver tier.

`running()` starts one with .ci/kube-apiserver (the binaries of the single-node cluster, .ci/cluster/build: built
from the Go module proxy and cached by the module's hash first when needed, minutes once per machine) in a temporary
folder and yields an ApiServer: its kubeconfig (an admin token, group system:masters), a kubectl helper,
kubernetes.client ApiClients as the admin or as a ServiceAccount (impersonation). The server has RBAC and full
admission of built-in and CRD schemas, but no controllers, scheduler or kubelet: objects are stored and validated,
never reconciled, and ServiceAccount tokens are never minted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "kube-apiserver"
BUILD_TIMEOUT_S = 2400  # a cold .ci/cluster/build: about 10 minutes on 2 cores
START_TIMEOUT_S = 180


class CommandError(subprocess.CalledProcessError):
    """A failed command, with its stderr in the message."""

    def __str__(self) -> str:
        argv = " ".join(map(str, self.cmd)) if isinstance(self.cmd, list | tuple) else str(self.cmd)
        return f"{argv}: exit status {self.returncode}: {(self.stderr or '').strip() or '(no stderr)'}"


def _run(argv: Sequence[str], check: bool = True, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess:
    if "input" not in kwargs:
        kwargs["stdin"] = subprocess.DEVNULL  # never the test runner's terminal
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        raise CommandError(done.returncode, list(argv), done.stdout, done.stderr)
    return done


def _script() -> Path:
    if not SCRIPT.is_file():
        raise FileNotFoundError(f"{SCRIPT} is missing: the API-server tests run from a checkout of the repository")
    return SCRIPT


def build() -> Path:
    """The cached kube-apiserver binary (the cluster build's), built first if this machine has none."""
    done = _run(["bash", str(_script()), "build"], timeout=BUILD_TIMEOUT_S)
    return Path(done.stdout.strip().splitlines()[-1])


def service_account_username(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass
class ApiServer:
    directory: Path
    kubeconfig: Path
    _clients: list[Any] = field(default_factory=list, repr=False)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        """`kubectl --kubeconfig KUBECONFIG ARGS` (text output captured); CommandError with stderr on failure unless
        check=False."""
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise FileNotFoundError("kubectl is not on PATH")
        extra = {"input": input} if input is not None else {}
        return _run([kubectl, "--kubeconfig", str(self.kubeconfig), *args], check=check, timeout=timeout, **extra)

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """`kubectl wait --for condition=established` on crd/NAME for each name, retried until timeout: kubectl
        fails at once ("status.conditions accessor error: <nil>") on a CRD the server has not given a status yet,
        instead of waiting."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            done = self.kubectl("wait", "--for", "condition=established", f"--timeout={left}s",
                                *(f"crd/{name}" for name in crds), check=False, timeout=left + 30)
            if done.returncode == 0:
                return
            if time.monotonic() >= deadline or "accessor error" not in done.stderr:
                raise CommandError(done.returncode, done.args, done.stdout, done.stderr)
            time.sleep(0.2)

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient as the admin (system:masters); closed when the server stops."""
        from kubernetes import config

        client = config.new_client_from_config(config_file=str(self.kubeconfig))
        self._clients.append(client)
        return client

    def service_account_client(self, namespace: str, name: str) -> Any:
        """An ApiClient acting as ServiceAccount namespace/name, for what RBAC lets that account do.

        No controller-manager runs, so no token is ever minted for the account; the admin impersonates it instead
        (Impersonate-User: system:serviceaccount:NAMESPACE:NAME). For a ServiceAccount user given without
        Impersonate-Group the server adds the account's fixed groups itself (system:serviceaccounts,
        system:serviceaccounts:NAMESPACE, system:authenticated), exactly what a real token would carry; one header is
        also all the client can send (its default headers hold one value per name)."""
        client = self.api_client()
        client.set_default_header("Impersonate-User", service_account_username(namespace, name))
        return client

    def close_clients(self) -> None:
        while self._clients:
            self._clients.pop().close()


@contextlib.contextmanager
def running(directory: str | os.PathLike | None = None) -> Iterator[ApiServer]:
    """Start etcd + kube-apiserver in directory (a new temporary one by default, removed afterwards) and stop them
    on exit; yields the ApiServer."""
    owned = directory is None
    root = Path(tempfile.mkdtemp(prefix="slipway-apiserver-") if owned else directory)
    build()  # outside `start`'s own timeout: the first build takes minutes
    try:
        done = _run(["bash", str(_script()), "start", str(root)], timeout=START_TIMEOUT_S)
        server = ApiServer(root, Path(done.stdout.strip().splitlines()[-1]))
        try:
            yield server
        finally:
            server.close_clients()
    finally:
        _run(["bash", str(_script()), "stop", str(root)], check=False, timeout=60)
        if owned:
            shutil.rmtree(root, ignore_errors=True)
