# shellcheck shell=bash
# The Kubeflow operators on the single-node cluster (sourced by .ci/kfp-cluster): the MPI Operator v0.8.0 (built by
# ../operators/build from the Go module proxy) with the MPIJob CRD at the version manifests/upstream/go.mod locks.
# Like KFP's servers, the operator runs on the host inside KFP's network namespace (its health port binds every
# interface: there only 10.244.0.2:8080), with the kfp client identity; its leader-election Lease lives in the
# namespace mpi-operator. It watches every namespace, as a cluster-wide install does.
OPERATOR_DAEMONS="mpi-operator"
MPI_OPERATOR_NAMESPACE=mpi-operator

operator_binaries() {
    if [ -n "${KFP_CLUSTER_OPERATORS_BIN:-}" ]; then OPERATORS_BIN="$KFP_CLUSTER_OPERATORS_BIN"
    else OPERATORS_BIN="$(bash "$ROOT/.ci/operators/build")"; fi
    [ -x "$OPERATORS_BIN/mpi-operator" ] || die "missing binary $OPERATORS_BIN/mpi-operator (run: bash .ci/operators/build)"
}

start_operators() {
    local crd
    crd="$("$PYTHON" -m slipway.core.upstream --path mpijob-crd)" || die "no MPIJob CRD (python -m slipway.core.upstream)"
    # create, not apply: apply's last-applied annotation would exceed the annotation size limit
    kubectl_admin create -f "$crd" >/dev/null
    wait_for "mpijob crd" 60 kubectl_admin wait --for condition=established --timeout=5s crd/mpijobs.kubeflow.org
    kubectl_admin create namespace "$MPI_OPERATOR_NAMESPACE" >/dev/null
    start_daemon mpi-operator ip netns exec "$KFP_NETNS" "$OPERATORS_BIN/mpi-operator" \
        --kubeConfig "$STATE/kfp.kubeconfig" --lock-namespace "$MPI_OPERATOR_NAMESPACE" --threadiness 2 \
        --cluster-domain cluster.local
    wait_for "mpi-operator" 60 "$PYTHON" -c \
        "import urllib.request as u; u.urlopen('http://$KFP_ADDRESS:8080/healthz')"
}
