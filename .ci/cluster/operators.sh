# shellcheck shell=bash
# The Kubeflow operators on the single-node cluster (sourced by .ci/kfp-cluster): the MPI Operator v0.8.2 (built by
# ../operators/build from the Go module proxy) with the MPIJob CRD at the version manifests/upstream/go.mod locks.
# Like KFP's servers, the operator runs on the host inside KFP's network namespace (its health port binds every
# interface: there only 10.244.0.2:8080), with the kfp client identity; its leader-election Lease lives in the
# namespace mpi-operator. It watches every namespace, as a cluster-wide install does.
#
# Katib v0.19.0 (the same build): its controller runs in KFP's network namespace too (it dials each Experiment's
# suggestion Service by name: that namespace resolves through the cluster DNS and routes ClusterIPs through this
# host), its db-manager on the bridge address, as the object store does (the controller reaching its own address
# through a ClusterIP would need hairpin NAT); the controller's cert generator makes its webhook certificate (into
# the Secret and /tmp/cert, here a folder of ours bound there for its process only) and patches the webhook
# configurations we create, which the API server reaches at the katib-controller Service's endpoint; trial metrics
# land in a database of KFP's MariaDB. The goptuna suggestion service (random, cmaes, sobol) and the metrics
# collector sidecar are one-binary images imported into containerd, as the cluster's own are; Katib's Python services
# (optuna: grid, tpe, multivariate-tpe; skopt: bayesianoptimization; hyperband; the medianstop early stopping) are
# one image on our base (../katib-suggestions/build), imported the same way.
OPERATOR_DAEMONS="mpi-operator katib-db-manager katib-controller"
MPI_OPERATOR_NAMESPACE=mpi-operator
# the images' tags: the Katib version the operators' module builds (one place for it: ../operators/go.mod)
KATIB_VERSION="$(sed -n 's|^\tgithub.com/kubeflow/katib \(v[^ ]*\)$|\1|p' "$ROOT/.ci/operators/go.mod")"
[ -n "$KATIB_VERSION" ] || die "no github.com/kubeflow/katib version in .ci/operators/go.mod"
KATIB_WEBHOOK_PORT=8443
KATIB_DB_MANAGER_PORT=6789
KATIB_HEALTH_PORT=18080

operator_binaries() {
    if [ -n "${KFP_CLUSTER_OPERATORS_BIN:-}" ]; then OPERATORS_BIN="$KFP_CLUSTER_OPERATORS_BIN"
    else OPERATORS_BIN="$(bash "$ROOT/.ci/operators/build")"; fi
    local name
    for name in mpi-operator katib-controller katib-db-manager katib-file-metricscollector katib-suggestion-goptuna \
            pgrep; do
        [ -x "$OPERATORS_BIN/$name" ] || die "missing binary $OPERATORS_BIN/$name (run: bash .ci/operators/build)"
    done
}

upstream_file() {  # upstream_file NAME: a CRD at the version manifests/upstream/go.mod locks
    "$PYTHON" -m slipway.core.kube.upstream --path "$1" || die "no $1 (python -m slipway.core.kube.upstream)"
}

start_operators() {
    local crd
    crd="$(upstream_file mpijob-crd)"
    # create, not apply: apply's last-applied annotation would exceed the annotation size limit
    kubectl_admin create -f "$crd" >/dev/null
    wait_for "mpijob crd" 60 kubectl_admin wait --for condition=established --timeout=5s crd/mpijobs.kubeflow.org
    kubectl_admin create namespace "$MPI_OPERATOR_NAMESPACE" >/dev/null
    # The MPI Operator always elects a leader and exits when it cannot renew its Lease in time: on a loaded machine
    # the API server once took longer, and the operator was gone for the rest of the run (CI, 2026-11-29). Its
    # Deployment's pod would be started again; so it is here, by a loop in the daemon's process group (down stops
    # both).
    # shellcheck disable=SC2016  # the loop's own "$@", expanded by the inner bash
    start_daemon mpi-operator bash -c 'while :; do "$@"; echo "kfp-cluster: exited ($?), started again in 1 s"; sleep 1
        done' mpi-operator ip netns exec "$KFP_NETNS" "$OPERATORS_BIN/mpi-operator" \
        --kubeConfig "$STATE/kfp.kubeconfig" --lock-namespace "$MPI_OPERATOR_NAMESPACE" --threadiness 2 \
        --cluster-domain cluster.local
    wait_for "mpi-operator" 60 http_ok "http://$KFP_ADDRESS:8080/healthz"
}

import_katib_images() {  # the suggestion services and the metrics collector sidecar, as the cluster's own images are
    local name specs=() python_services extra
    for name in katib-file-metricscollector katib-suggestion-goptuna; do
        extra=""  # the collector stops an early-stopped trial's process through pgrep (ours: no procps in its image)
        [ "$name" = katib-file-metricscollector ] && extra=",$OPERATORS_BIN/pgrep=/bin/pgrep"
        specs+=("$name:$KATIB_VERSION|$OPERATORS_BIN/$name=/bin/$name$extra|/bin/$name")
    done
    import_binary_images "$STATE/operator-images" "$(basename "$OPERATORS_BIN")" "${specs[@]}"
    python_services="$(bash "$ROOT/.ci/katib-suggestions/build")" || die "Katib's Python services: the image failed"
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$python_services" >/dev/null
}

# Each algorithm's suggestion service: goptuna's binary image, or the Python image with the service's main module.
GOPTUNA_ALGORITHMS="random cmaes sobol"
declare -A PYTHON_SUGGESTIONS=([grid]=optuna [tpe]=optuna [multivariate-tpe]=optuna
    [bayesianoptimization]=skopt [hyperband]=hyperband)

katib_config() {  # Katib's configuration: the controller's file and the katib-config ConfigMap's one key
    local algorithm
    cat <<EOF
apiVersion: config.kubeflow.org/v1beta1
kind: KatibConfig
init:
  certGenerator: {enable: true, webhookServiceName: katib-controller, webhookSecretName: katib-webhook-cert}
  controller:
    webhookPort: $KATIB_WEBHOOK_PORT
    metricsAddr: "0"
    healthzAddr: ":$KATIB_HEALTH_PORT"
    trialResources: [Job.v1.batch, MPIJob.v2beta1.kubeflow.org]
runtime:
  metricsCollectors:
  - {kind: StdOut, image: "slipway.local/katib-file-metricscollector:$KATIB_VERSION", imagePullPolicy: IfNotPresent}
  suggestions:
EOF
    for algorithm in $GOPTUNA_ALGORITHMS; do
        echo "  - {algorithmName: $algorithm, image: \"slipway.local/katib-suggestion-goptuna:$KATIB_VERSION\", imagePullPolicy: IfNotPresent}"
    done
    for algorithm in "${!PYTHON_SUGGESTIONS[@]}"; do
        echo "  - {algorithmName: $algorithm, image: \"slipway.local/katib-suggestion-python:$KATIB_VERSION\"," \
            "imagePullPolicy: IfNotPresent, command: [python, cmd/suggestion/${PYTHON_SUGGESTIONS[$algorithm]}/v1beta1/main.py]}"
    done
    echo "  earlyStoppings:"  # the image's default command is medianstop
    echo "  - {algorithmName: medianstop, image: \"slipway.local/katib-suggestion-python:$KATIB_VERSION\", imagePullPolicy: IfNotPresent}"
}

webhook_configuration() {  # webhook_configuration KIND NAME: the head of a (Validating|Mutating)WebhookConfiguration
    printf -- '---\napiVersion: admissionregistration.k8s.io/v1\nkind: %s\nmetadata: {name: %s}\nwebhooks:\n' "$1" "$2"
}

webhook() {  # webhook NAME REVIEW_VERSION CLIENT_CONFIG RULES...: one webhook of a configuration (RULES: YAML lines)
    local name="$1" version="$2" client="$3" line; shift 3
    printf -- '- name: %s\n  sideEffects: None\n  admissionReviewVersions: [%s]\n  clientConfig: {%s}\n' \
        "$name" "$version" "$client"
    for line in "$@"; do printf '  %s\n' "$line"; done
}

katib_objects() {  # what a Katib install puts beside its controller, pointed at where this cluster runs it
    local service="service: {name: katib-controller, namespace: $KFP_NAMESPACE, port: $KATIB_WEBHOOK_PORT"
    local experiments="rules: [{apiGroups: [kubeflow.org], apiVersions: [v1beta1], operations: [CREATE, UPDATE], resources: [experiments]}]"
    printf 'apiVersion: v1\nkind: Secret\nmetadata: {name: katib-webhook-cert, namespace: %s}\n' "$KFP_NAMESPACE"
    webhook_configuration ValidatingWebhookConfiguration katib.kubeflow.org
    webhook validator.experiment.katib.kubeflow.org v1 "$service, path: /validate-experiment}" "$experiments"
    webhook_configuration MutatingWebhookConfiguration katib.kubeflow.org
    webhook defaulter.experiment.katib.kubeflow.org v1 "$service, path: /mutate-experiment}" "$experiments"
    # only pods of namespaces that ask for Katib's metrics collector (the kubeflow one here)
    webhook mutator.pod.katib.kubeflow.org v1 "$service, path: /mutate-pod}" \
        "namespaceSelector: {matchLabels: {katib.kubeflow.org/metrics-collector-injection: enabled}}" \
        'rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]'
    ENDPOINT="$KFP_ADDRESS" host_service katib-controller "$KATIB_WEBHOOK_PORT:webhook"
    host_service katib-db-manager "$KATIB_DB_MANAGER_PORT:api"
}

start_katib() {
    local name config="$STATE/katib-config.yaml" certs="$STATE/katib-cert"
    for name in katib-experiment-crd katib-trial-crd katib-suggestion-crd; do
        kubectl_admin create -f "$(upstream_file "$name")" >/dev/null
    done
    import_katib_images
    katib_config > "$config"
    kubectl_admin -n "$KFP_NAMESPACE" create configmap katib-config --from-file="katib-config.yaml=$config" >/dev/null
    katib_objects | kubectl_admin apply -f - >/dev/null
    kubectl_admin label namespace "$KFP_NAMESPACE" katib.kubeflow.org/metrics-collector-injection=enabled >/dev/null
    mariadb --no-defaults --socket="$STATE/mysql.sock" -uroot -e "CREATE DATABASE IF NOT EXISTS katib"
    start_daemon katib-db-manager env DB_NAME=mysql DB_USER=kfp DB_PASSWORD= \
        KATIB_MYSQL_DB_HOST="$GATEWAY" KATIB_MYSQL_DB_PORT="$KFP_DB_PORT" KATIB_MYSQL_DB_DATABASE=katib \
        "$OPERATORS_BIN/katib-db-manager" --listen-address "$GATEWAY:$KATIB_DB_MANAGER_PORT"
    # The cert generator writes its certificate into the Secret and waits to find it in /tmp/cert (fixed in Katib),
    # where a pod would mount the Secret: here our folder, bound there in the controller's own mount namespace (ip
    # netns exec makes one), and filled from the Secret below as the kubelet would.
    rm -rf "$certs"; mkdir -p "$certs"
    start_daemon katib-controller ip netns exec "$KFP_NETNS" env KUBECONFIG="$STATE/kfp.kubeconfig" \
        KATIB_CORE_NAMESPACE="$KFP_NAMESPACE" KATIB_DB_MANAGER_SERVICE_NAMESPACE="$KFP_NAMESPACE" \
        sh -c 'mkdir -p /tmp/cert && mount --bind "$0" /tmp/cert && exec "$@"' "$certs" \
        "$OPERATORS_BIN/katib-controller" --katib-config "$config"
    wait_for "katib-controller" 60 sh -c "kubectl --kubeconfig '$STATE/admin.kubeconfig' -n $KFP_NAMESPACE get \
        secret katib-webhook-cert -o jsonpath='{.data.tls\.key}' | grep -q ."
    # Each file whole when it appears (a rename), the key first: the controller waits for the files and reads them
    # at once, and had once read a tls.key still being written ("failed to find any PEM data in key input").
    for name in tls.key tls.crt ca.crt; do
        kubectl_admin -n "$KFP_NAMESPACE" get secret katib-webhook-cert -o jsonpath="{.data.${name//./\\.}}" \
            | base64 -d > "$certs/.$name"
        mv "$certs/.$name" "$certs/$name"
    done
    wait_for "katib-db-manager" 60 "$PYTHON" -c \
        "import socket; socket.create_connection(('$GATEWAY', $KATIB_DB_MANAGER_PORT), 2)"
    wait_for "katib-controller" 120 http_ok "http://$KFP_ADDRESS:$KATIB_HEALTH_PORT/readyz"
}
