# shellcheck shell=bash
# The Gateway API on the single-node cluster (sourced by .ci/kfp-cluster, with KServe): KServe v0.20 in Gateway API
# mode makes an HTTPRoute per InferenceService (and per predictor) to the Gateway kserve/kserve-ingress-gateway, and
# our deploy step writes its own weighted HTTPRoute there for a canary's share; Traefik v3.6.12 (built by
# ../gateway/build from the Go module proxy) is the implementation that routes them and writes their status, which
# KServe's IngressReady (part of Ready) waits for.
# - The Gateway API v1.4.0 standard-channel CRDs (the version Traefik 3.6.12 implements, read from Go's module cache
#   at the version ../gateway/go.mod pins), created before KServe's controller starts: in Gateway API mode it exits
#   at start when HTTPRoute is not served.
# - The GatewayClass traefik and the Gateway, one HTTP listener on port 80 taking routes of every namespace, and a
#   Service of the same name (port 80) whose endpoint is Traefik's, for pods and for KFP's network namespace (whose
#   packets to it come back to it: its bridge port is in hairpin mode, node.sh).
# - Traefik, run like the operators as a process in KFP's network namespace with the kfp client identity (in
#   system:masters: it lists and watches Services, EndpointSlices, Secrets, ConfigMaps, Namespaces and the Gateway
#   API kinds, and updates their status, with no RBAC of ours). It forwards to the ready pod addresses of each
#   backend Service's EndpointSlices, on the bridge. Listener port and entry point port are one number: Traefik
#   binds a listener to the entry point whose address ends in ":<port>". Port 80 is free in that namespace (KFP's
#   API server 8888/8887, the operators' health and webhook ports); the ping entry point is 18082, beside KServe's
#   and Katib's health ports.
# - KFP_CLUSTER_GATEWAY=later: `up` installs all of the above but Traefik, and does not build it; `kfp-cluster
#   gateway` starts it later (.ci/test: its cold build comes last, after what the cluster tiers wait for).
GATEWAY_DAEMONS="traefik"
INGRESS_CLASS=traefik
INGRESS_NAMESPACE="$KSERVE_NAMESPACE"
INGRESS_GATEWAY=kserve-ingress-gateway  # the name KServe's own chart gives its Gateway
INGRESS_PORT=80
INGRESS_DOMAIN=slipway.example  # InferenceServices' host names: <name>-<namespace>.slipway.example (KServe's template)
TRAEFIK_PING_PORT=18082
GATEWAY_LATER="${KFP_CLUSTER_GATEWAY:-}"

check_gateway_later() {  # by `up` only: `down` and `status` work whatever it says
    case "$GATEWAY_LATER" in ""|later) ;; *) die "KFP_CLUSTER_GATEWAY=$GATEWAY_LATER: leave it unset, or later" ;; esac
}

gateway_binaries() {
    if [ -n "${KFP_CLUSTER_GATEWAY_BIN:-}" ]; then GATEWAY_BIN="$KFP_CLUSTER_GATEWAY_BIN"
    else GATEWAY_BIN="$(bash "$ROOT/.ci/gateway/build")"; fi
    [ -x "$GATEWAY_BIN/traefik" ] || die "missing binary $GATEWAY_BIN/traefik (run: bash .ci/gateway/build)"
}

install_gateway_api() {  # the standard channel's CRDs (not its VAP files), served before KServe's controller starts
    local dir file files=()
    dir="$(cd "$ROOT/.ci/gateway" && go_module_dir sigs.k8s.io/gateway-api)"  # the version Traefik's module pins
    for file in "$dir"/config/crd/standard/*.yaml; do
        grep -q '^kind: CustomResourceDefinition$' "$file" && files+=(-f "$file")
    done
    [ ${#files[@]} -gt 0 ] || die "no Gateway API CRDs in $dir/config/crd/standard"
    # create, not apply: apply's last-applied annotation would exceed the annotation size limit
    kubectl_admin create "${files[@]}" >/dev/null
    wait_for "gateway api crds" 60 kubectl_admin wait --for condition=established --timeout=5s \
        crd/{gatewayclasses,gateways,httproutes,grpcroutes,referencegrants,backendtlspolicies}.gateway.networking.k8s.io
}

gateway_objects() {  # the GatewayClass, the Gateway and its Service (in KServe's namespace: made by start_kserve)
    cat <<EOF
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: $INGRESS_CLASS}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: $INGRESS_GATEWAY, namespace: $INGRESS_NAMESPACE}
spec:
  gatewayClassName: $INGRESS_CLASS
  listeners: [{name: http, protocol: HTTP, port: $INGRESS_PORT, allowedRoutes: {namespaces: {from: All}}}]
EOF
    KFP_NAMESPACE="$INGRESS_NAMESPACE" ENDPOINT="$KFP_ADDRESS" host_service "$INGRESS_GATEWAY" "80=$INGRESS_PORT:http"
}

install_gateway() { gateway_objects | kubectl_admin apply -f - >/dev/null; }

start_traefik() {  # nothing when it runs already; then wait until the Gateway is programmed
    if ! running traefik; then
        # Not in-cluster configuration (KUBERNETES_SERVICE_HOST, were this script run in a pod): our kubeconfig.
        # No version check (it would call GitHub), no usage reports. A new configuration at most every 0.5 s (its
        # default, 2 s, let a route answer 503 for a second after its pods were ready: a test would wait that long).
        start_daemon traefik ip netns exec "$KFP_NETNS" \
            env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT KUBECONFIG="$STATE/kfp.kubeconfig" \
            "$GATEWAY_BIN/traefik" --global.checknewversion=false --global.sendanonymoususage=false \
            --log.level=INFO --log.nocolor=true --providers.providersthrottleduration=500ms \
            --providers.kubernetesgateway=true \
            --providers.kubernetesgateway.statusaddress.ip="$KFP_ADDRESS" \
            --entrypoints.web.address="$KFP_ADDRESS:$INGRESS_PORT" \
            --entrypoints.traefik.address="$KFP_ADDRESS:$TRAEFIK_PING_PORT" --ping=true
    fi
    wait_for "traefik" 60 http_ok "http://$KFP_ADDRESS:$TRAEFIK_PING_PORT/ping"
    wait_for "traefik (its Gateway)" 60 kubectl_admin -n "$INGRESS_NAMESPACE" wait --for condition=Programmed \
        --timeout=5s "gateway/$INGRESS_GATEWAY"
}
