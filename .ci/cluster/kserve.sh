# shellcheck shell=bash
# KServe v0.20.0 on the single-node cluster (sourced by .ci/kfp-cluster; started by `up` unless KFP_CLUSTER_KSERVE=0;
# tests/test_kfp_kserve.py): its controller manager (built by ../kserve/build from the Go module
# proxy) in Standard mode (raw Deployments and Services; no Knative, no Istio, no Ingress: Gateway API HTTPRoutes),
# run like the other operators as a process in KFP's network namespace with the kfp client identity.
# - The CRDs it watches or lists, at the version manifests/upstream/go.mod locks (the Gateway API's: gateway.sh).
# - Its configuration, the inferenceservice-config ConfigMap in the kserve namespace: Standard by default; Gateway
#   API mode: an HTTPRoute per InferenceService (and per predictor) to the Gateway of gateway.sh, which Traefik
#   routes and marks (IngressReady, part of Ready, waits for every route's status); status.url is the Gateway's
#   host name, http://<name>-<namespace>.slipway.example (KServe's default template; no DNS resolves it: a client
#   sends it as the Host header to the gateway), status.address stays the predictor Service's in-cluster name. The
#   ingress domain is not svc.cluster.local, for which KServe makes no route; ingressGateway (Istio's) is required
#   all the same, unused. The S3 Secret keys are ours (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, not KServe's
#   awsAccessKeyID); the injected containers' resources are set because KServe refuses to reconcile without them.
# - Its webhooks, with a certificate of our cluster CA: the InferenceService defaulter and validator (the defaulter
#   is what turns RawDeployment into Standard, which the validator demands for spec.canary). Not its pod mutator:
#   no storage-initializer image comes from a registry here, and our serving runtime reads the s3:// base itself
#   (manifests/kserve-serving-runtime.yaml).
KSERVE_DAEMONS="kserve-manager"
KSERVE_NAMESPACE=kserve
KSERVE_WEBHOOK_PORT=9443
KSERVE_HEALTH_PORT=18081
KSERVE_WEBHOOK_SERVICE=kserve-webhook-server-service

kserve_binaries() {
    if [ -n "${KFP_CLUSTER_KSERVE_BIN:-}" ]; then KSERVE_BIN="$KFP_CLUSTER_KSERVE_BIN"
    else KSERVE_BIN="$(bash "$ROOT/.ci/kserve/build")"; fi
    [ -x "$KSERVE_BIN/kserve-manager" ] || die "missing binary $KSERVE_BIN/kserve-manager (run: bash .ci/kserve/build)"
}

kserve_config() {  # the inferenceservice-config ConfigMap's keys, one JSON document each
    local resources='"cpuRequest": "100m", "cpuLimit": "1", "memoryRequest": "100Mi", "memoryLimit": "1Gi"'
    cat <<EOF
deploy: '{"defaultDeploymentMode": "Standard"}'
ingress: '{"ingressGateway": "unused/unused", "enableGatewayApi": true,
  "kserveIngressGateway": "$INGRESS_NAMESPACE/$INGRESS_GATEWAY", "disableIngressCreation": false,
  "disableIstioVirtualHost": true, "ingressDomain": "$INGRESS_DOMAIN", "urlScheme": "http"}'
inferenceService: '{}'
credentials: '{"s3": {"s3AccessKeyIDName": "AWS_ACCESS_KEY_ID", "s3SecretAccessKeyName": "AWS_SECRET_ACCESS_KEY"}}'
storageInitializer: '{"image": "unused:0", $resources}'
agent: '{"image": "unused:0", $resources}'
logger: '{"image": "unused:0", $resources}'
batcher: '{"image": "unused:0", $resources}'
EOF
}

kserve_webhooks() {
    local ca service path rules
    ca="$(base64 -w0 < "$PKI/ca.crt")"
    service="service: {name: $KSERVE_WEBHOOK_SERVICE, namespace: $KSERVE_NAMESPACE, port: $KSERVE_WEBHOOK_PORT"
    path="serving-kserve-io-v1beta1-inferenceservice"
    rules="rules: [{apiGroups: [serving.kserve.io], apiVersions: [v1beta1], operations: [CREATE, UPDATE], resources: [inferenceservices]}]"
    webhook_configuration MutatingWebhookConfiguration inferenceservice.serving.kserve.io
    webhook inferenceservice.kserve-webhook-server.defaulter v1beta1 "$service, path: /mutate-$path}, caBundle: $ca" \
        "$rules"
    webhook_configuration ValidatingWebhookConfiguration inferenceservice.serving.kserve.io
    webhook inferenceservice.kserve-webhook-server.validator v1beta1 "$service, path: /validate-$path}, caBundle: $ca" \
        "$rules"
}

start_kserve() {
    local name tmp="$STATE/kserve-tmp"
    for name in inferenceservice kserve-servingruntime kserve-clusterservingruntime kserve-trainedmodel \
            kserve-inferencegraph kserve-clusterstoragecontainer; do
        kubectl_admin create -f "$(upstream_file "$name-crd")" >/dev/null
    done
    # the manager exits when a kind it watches is not served yet
    wait_for "kserve crds" 60 kubectl_admin wait --for condition=established --timeout=5s \
        crd/{inferenceservices,servingruntimes,clusterservingruntimes,trainedmodels,inferencegraphs}.serving.kserve.io \
        crd/clusterstoragecontainers.serving.kserve.io
    kubectl_admin create namespace "$KSERVE_NAMESPACE" >/dev/null
    {
        printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inferenceservice-config, namespace: %s}\ndata:\n' \
            "$KSERVE_NAMESPACE"
        kserve_config | sed 's/^/  /'
    } | kubectl_admin create -f - >/dev/null
    # The webhook certificate, for the Service name the API server verifies (it dials the endpoint, checks the name)
    rm -rf "$tmp"; mkdir -p "$tmp/k8s-webhook-server/serving-certs"
    cert kserve-webhook "/CN=$KSERVE_WEBHOOK_SERVICE" \
        "DNS:$KSERVE_WEBHOOK_SERVICE.$KSERVE_NAMESPACE.svc,DNS:$KSERVE_WEBHOOK_SERVICE.$KSERVE_NAMESPACE.svc.cluster.local"
    cp "$PKI/kserve-webhook.crt" "$tmp/k8s-webhook-server/serving-certs/tls.crt"
    cp "$PKI/kserve-webhook.key" "$tmp/k8s-webhook-server/serving-certs/tls.key"
    { KFP_NAMESPACE="$KSERVE_NAMESPACE" ENDPOINT="$KFP_ADDRESS" host_service "$KSERVE_WEBHOOK_SERVICE" \
        "$KSERVE_WEBHOOK_PORT:webhook"; kserve_webhooks; } | kubectl_admin apply -f - >/dev/null
    start_daemon kserve-manager ip netns exec "$KFP_NETNS" env KUBECONFIG="$STATE/kfp.kubeconfig" \
        POD_NAMESPACE="$KSERVE_NAMESPACE" CLUSTER_DOMAIN=cluster.local TMPDIR="$tmp" \
        "$KSERVE_BIN/kserve-manager" -metrics-addr=0 -health-probe-addr=":$KSERVE_HEALTH_PORT" \
        -webhook-port="$KSERVE_WEBHOOK_PORT"
    wait_for "kserve-manager" 120 http_ok "http://$KFP_ADDRESS:$KSERVE_HEALTH_PORT/readyz"
}
