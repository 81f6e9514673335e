# The Kubernetes layer of the single-node cluster (sourced by .ci/kfp-cluster): packages, the pod network, etcd,
# the control plane, containerd with the infrastructure images, kubelet, kube-proxy and cluster DNS, and the
# cleanup of all of it.

K8S_DAEMONS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy dns"
CONTAINERD_SOCK="$STATE/containerd/containerd.sock"
PAUSE_IMAGE=slipway.local/pause:catatonit
PACKAGES="containerd:containerd runc:runc catatonit:catatonit iptables:iptables \
conntrack:conntrack openssl:openssl mariadbd:mariadb-server /usr/lib/cni/bridge:containernetworking-plugins"

install_packages() {  # a command name, or a path for packages that put nothing on PATH (lib.sh's apt_install)
    # shellcheck disable=SC2086  # one spec per word
    apt_install $PACKAGES
}

preflight() {
    local left name
    left="$(cluster_processes list | awk '{printf "%s%s (%s)", sep, $2, $1; sep=", "}')" || true
    [ -z "$left" ] || die "processes of an earlier cluster are still running: $left: run '$0 down' first"
    for name in $DAEMONS; do  # one started by an older version of this script, without the marker
        running "$name" && die "$name is already running (pid $(cat "$RUN/$name.pid")): run '$0 down' first"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && die "the bridge $BRIDGE exists (a killed run?): run '$0 down' first"
    local port
    for port in "127.0.0.1:$ETCD_PORT" "127.0.0.1:$((ETCD_PORT + 1))"; do
        if (exec 3<>"/dev/tcp/${port%:*}/${port#*:}") 2>/dev/null; then
            die "port $port is in use (another cluster, or a killed run: '$0 down')"
        fi
    done
    return 0
}

make_network() {
    # Our own bridge and address, before anything binds to it; the CNI bridge plugin adopts it.
    ip link add "$BRIDGE" type bridge
    ip addr add "$GATEWAY/16" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    ip route add blackhole "$SERVICE_CIDR"  # a ClusterIP kube-proxy has not rewritten goes nowhere
    sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
    # Pods talk to each other and to this host's processes on the bridge, never beyond this machine.
    iptables -N SLIPWAY-EGRESS
    iptables -A SLIPWAY-EGRESS -d "$POD_CIDR" -j RETURN
    iptables -A SLIPWAY-EGRESS -j DROP
    iptables -I FORWARD -s "$POD_CIDR" -j SLIPWAY-EGRESS
    # KFP's API server, agent and controller run in a namespace of their own, joined to the bridge.
    ip netns add "$KFP_NETNS"
    # what its processes resolve names with (ip netns exec mounts it over /etc/resolv.conf): the cluster DNS, with
    # a pod's search list (Katib's controller dials <service>.<namespace>:port)
    mkdir -p "/etc/netns/$KFP_NETNS"
    printf 'nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' \
        "$GATEWAY" "$KFP_NAMESPACE" > "/etc/netns/$KFP_NETNS/resolv.conf"
    ip link add slipway-kfp0 type veth peer name slipway-kfp1
    ip link set slipway-kfp1 netns "$KFP_NETNS"
    ip link set slipway-kfp0 master "$BRIDGE" up
    # Hairpin, as the CNI plugin sets it on pods' ports: a process there reaching a Service whose endpoint is this
    # namespace's own address (the gateway's, KFP's API server's) has its packet, DNATed here, sent back out the port
    # it came in on (kube-proxy masquerades it, so the answer comes back the same way)
    ip link set slipway-kfp0 type bridge_slave hairpin on
    ip -n "$KFP_NETNS" addr add "$KFP_ADDRESS/16" dev slipway-kfp1
    ip -n "$KFP_NETNS" link set slipway-kfp1 up
    ip -n "$KFP_NETNS" link set lo up
    # ClusterIPs through this host, where kube-proxy rewrites them as it does pods' (Katib's controller dials them)
    ip -n "$KFP_NETNS" route add "$SERVICE_CIDR" via "$GATEWAY"
    mkdir -p "$STATE/cni" "$STATE/cni-ipam"
    cat > "$STATE/cni/10-slipway.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "slipway", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
   "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni-ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY", "rangeStart": "${POD_CIDR%.0.0/16}.1.2"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
EOF
}

start_control_plane() {
    rm -rf "$STATE/etcd"
    start_daemon etcd "$BIN/etcd" --name slipway --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
        --initial-cluster "slipway=http://127.0.0.1:$((ETCD_PORT + 1))"
    # --enable-aggregator-routing: webhooks (Katib's, KServe's) are dialled at their Service's endpoint, not its
    # ClusterIP, which this host cannot reach (kube-proxy rewrites pods' packets; the CIDR is a blackhole here)
    start_daemon kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address "$GATEWAY" --advertise-address "$GATEWAY" --secure-port "$API_PORT" \
        --service-cluster-ip-range "$SERVICE_CIDR" --client-ca-file "$PKI/ca.crt" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
        --kubelet-preferred-address-types InternalIP \
        --enable-aggregator-routing=true \
        --profiling=false
    wait_for "kube-apiserver" 90 kubectl_admin get --raw /readyz
}

start_controllers() {
    local common=(--bind-address 127.0.0.1 --leader-elect=false --profiling=false)
    start_daemon kube-controller-manager "$BIN/kube-controller-manager" "${common[@]}" \
        --kubeconfig "$STATE/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
        --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
        --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR" \
        --allocate-node-cidrs=false
    start_daemon kube-scheduler "$BIN/kube-scheduler" "${common[@]}" --kubeconfig "$STATE/scheduler.kubeconfig" \
        --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
        --authorization-kubeconfig "$STATE/scheduler.kubeconfig"
}

start_containerd() {
    mkdir -p "$STATE/containerd"
    cat > "$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: a sandbox's oom_score_adj of -998 cannot be written and runc fails without this
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    # a pulled layer lives once, unpacked: its compressed blob goes once unpacked (our images are GBs; the
    # registry on loopback still holds them)
    discard_unpacked_layers = true
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
EOF
    start_daemon containerd containerd --config "$STATE/containerd/config.toml"
    wait_for "containerd" 30 ctr --address "$CONTAINERD_SOCK" version
}

import_binary_images() {  # import_binary_images ROOT KEY SPEC...: one-binary images into containerd's k8s namespace
    # SPEC is NAME:TAG|FILE=PATH_IN_IMAGE[,FILE=PATH_IN_IMAGE...]|ENTRYPOINT ARGS. The OCI archives are kept under
    # ROOT/KEY (the same binaries give the same digests; KEY names the build they came from, and other builds'
    # archives are removed).
    local root="$1" key="$2" spec; shift 2
    local folder="$root/$key"
    mkdir -p "$folder"
    prune_except "$root" "$key"
    for spec in "$@"; do
        local name="${spec%%|*}" rest="${spec#*|}" file files=()
        local listed="${rest%%|*}" entrypoint="${rest#*|}" archive="$folder/${name%%:*}.tar"
        for file in ${listed//,/ }; do files+=(--file "$file"); done
        # shellcheck disable=SC2086  # the entrypoint's words are separate arguments
        [ -f "$archive" ] || python3 "$HERE/oci_image.py" "$archive" "slipway.local/$name" "${files[@]}" \
            --entrypoint $entrypoint >/dev/null
        ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$archive" >/dev/null
    done
}

import_images() {
    # The pod sandbox and KFP's and Argo's infrastructure images: one static binary each.
    import_binary_images "$STATE/images" "$(basename "$BIN")" \
        "pause:catatonit|/usr/bin/catatonit=/pause|/pause -P" \
        "kfp-driver:$KFP_VERSION|$BIN/kfp-driver=/bin/driver|/bin/driver" \
        "kfp-launcher:$KFP_VERSION|$BIN/kfp-launcher-v2=/bin/launcher-v2|/bin/launcher-v2" \
        "argoexec:$ARGO_VERSION|$BIN/argoexec=/bin/argoexec|/bin/argoexec" \
        "workflow-controller:$ARGO_VERSION|$BIN/workflow-controller=/bin/workflow-controller|/bin/workflow-controller"
}

start_node() {
    mkdir -p "$STATE/kubelet"
    : > "$STATE/resolv.conf"  # the pods' upstream resolvers: none (this machine reaches no DNS beyond ours)
    # Eviction at 1 GiB free, not at a share: 2% of a CI machine's 252 GB disk is 5 GB, under which the kubelet
    # taints the node (DiskPressure) and evicts its pods; a CI whose disk fell to 1.9 GB free failed every KFP
    # test after that (bench/RESULTS.md). Image GC is off: the tests' images stay.
    cat > "$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $GATEWAY
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
cgroupDriver: cgroupfs
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
serializeImagePulls: false
evictionHard: {memory.available: 200Mi, nodefs.available: 1Gi, imagefs.available: 1Gi, nodefs.inodesFree: 2%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
    start_kubelet
    cat > "$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: $GATEWAY
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$GATEWAY/32]
conntrack: {maxPerCore: 0}
EOF
    start_daemon kube-proxy "$BIN/kube-proxy" --config "$STATE/kube-proxy.yaml"
    start_daemon dns python3 "$HERE/dns.py" --listen "$GATEWAY:53" --server "https://$GATEWAY:$API_PORT" \
        --ca "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key"
}

start_kubelet() {
    start_daemon kubelet "$BIN/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
        --root-dir "$STATE/kubelet" --hostname-override "$NODE" --node-ip "$GATEWAY"
}

node_ready() {
    # kubelet exits at once when containerd answers but its CRI is still initializing ("server is not initialized
    # yet", seen on a busy machine): start it again, keeping the log of the try that exited.
    if ! running kubelet; then
        cat "$RUN/kubelet.log" >> "$RUN/kubelet-exited.log"
        start_kubelet
        return 1
    fi
    kubectl --kubeconfig "$STATE/admin.kubeconfig" get node "$NODE" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

wait_node_ready() {
    wait_for "kubelet" 120 node_ready
    # The DNS Service's ClusterIP, answered by dns.py on the bridge address
    kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec: {clusterIP: $DNS_IP, ports: [{name: dns, port: 53, protocol: UDP, targetPort: 53}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: kube-dns, namespace: kube-system}
subsets: [{addresses: [{ip: $GATEWAY}], ports: [{name: dns, port: 53, protocol: UDP}]}]
EOF
    wait_for "default service account" 60 kubectl_admin -n default get serviceaccount default
}

stop_daemons() {  # stop_daemons NAME...: SIGTERM to each one's process group at once, SIGKILL to whatever is left
    # after one 10 s grace they share (one at a time, every daemon slow to stop cost its own 10 s: a minute in all)
    local name pid pids=() deadline
    for name in "$@"; do
        [ -f "$RUN/$name.pid" ] || continue
        pid="$(cat "$RUN/$name.pid")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    deadline=$((SECONDS + 10))
    while [ ${#pids[@]} -gt 0 ] && [ "$SECONDS" -lt "$deadline" ]; do
        local alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        pids=("${alive[@]}")
        [ ${#pids[@]} -gt 0 ] && sleep 0.2
    done
    for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
    for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

stop_pods() {  # every pod's containers, then its sandbox, through the CRI (the kube binary's stop-pods)
    local bin
    bin="$(cat "$RUN/bin" 2>/dev/null || true)"
    running containerd && [ -x "$bin/kube" ] || return 0
    "$bin/kube" stop-pods --endpoint "unix://$CONTAINERD_SOCK" --grace 10 >&2 \
        || echo "kfp-cluster: stopping the pods through the CRI failed; what is left is killed below" >&2
}

clean_containers() {
    # Shims outlive containerd: those its state folder names are stopped by id, then whatever of the cluster is
    # still alive (a pod whose shim is gone, a process a killed `up` lost track of), each named; then what kubelet
    # and containerd mounted under the state folder is unmounted.
    local killed
    killed="$({ cluster_processes shims; cluster_processes kill; } | paste -sd ';' - | sed 's/;/; /g')"
    [ -z "$killed" ] || echo "kfp-cluster: down $killed" >&2
    local mount
    { grep -o " $STATE/[^ ]*" /proc/mounts 2>/dev/null || true; } | sort -r | while read -r mount; do
        umount -l "$mount" 2>/dev/null || true
    done
    rm -rf "$STATE/containerd/state" "$STATE/kubelet" "$STATE/cni-ipam"
    local controller
    for controller in /sys/fs/cgroup/*/kubepods; do
        [ -d "$controller" ] && find "$controller" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    return 0
}

clean_network() {
    local netns
    for netns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do ip netns delete "$netns" || true; done
    ip netns delete "$KFP_NETNS" 2>/dev/null || true
    rm -rf "/etc/netns/$KFP_NETNS"
    # A CNI call still finishing for a pod being torn down can hold (or re-create) the bridge for a moment: retry
    local try
    for try in 1 2 3 4 5 6 7 8 9 10; do
        ip link show "$BRIDGE" >/dev/null 2>&1 || break
        ip link delete "$BRIDGE" 2>/dev/null || sleep 1
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        echo "kfp-cluster: could not delete the bridge $BRIDGE: $(ip link delete "$BRIDGE" 2>&1)" >&2; return 1
    fi
    ip route del blackhole "$SERVICE_CIDR" 2>/dev/null || true
    # Drop the chains kube-proxy, the CNI plugins and this script made, and every rule jumping to them.
    local table
    for table in filter nat mangle; do
        iptables-save -t "$table" | grep -Ev '^:(KUBE-|CNI-|SLIPWAY-)|^-A (KUBE-|CNI-|SLIPWAY-)|-j (KUBE-|CNI-|SLIPWAY-)' \
            | iptables-restore 2>/dev/null || true
    done
    return 0
}
