# The Kubeflow Pipelines layer of the single-node cluster (sourced by .ci/kfp-cluster): KFP's stores (MariaDB, an
# S3 object store, ML Metadata), the objects KFP's pods expect in the kubeflow namespace, Argo's workflow
# controller (a pod: it serves health on every interface), and KFP's API server, persistence agent and
# scheduled-workflow controller (host processes on the bridge address, reached by pods through Services).
# The object store: SLIPWAY_KFP_OBJECT_STORE=seaweedfs (default: SeaweedFS's `weed server` with its S3 gateway, as
# KFP 2.15+ installs it in place of MinIO; built by .ci/seaweedfs/build; it checks signatures, so only S3_KEY signs)
# or moto (moto's S3 server, in memory, any key). Either is reached by pods as minio-service.kubeflow:9000 (KFP 2.15
# keeps that Service for SeaweedFS, port 9000 to its 8333) and seaweedfs.kubeflow:8333 or :9000 (KFP 2.15+; 2.16+
# only this one).

KFP_VERSION=2.14.3
ARGO_VERSION=v3.6.7
# Fixed ports stay below 32768: Linux hands out 32768-60999 as the local ports of outgoing connections, and a test
# connecting somewhere at the moment a daemon starts could hold its port (a cold CI's cluster lane failed so, the
# filer's gRPC port 43388 taken while the tests beside it ran).
KFP_DB_PORT=23306
KFP_HTTP_PORT=8888
KFP_GRPC_PORT=8887
OBJECT_STORE="${SLIPWAY_KFP_OBJECT_STORE:-seaweedfs}"
if [ "$OBJECT_STORE" = seaweedfs ]; then S3_PORT=8333; else S3_PORT=9000; fi  # each server's own S3 port
# SeaweedFS's master, volume server and filer (HTTP; gRPC on each + 10000) and S3 gateway gRPC, on loopback: away
# from the defaults (9333, 8080, 8888), which other programs on a shared machine take, and from the ephemeral range
SEAWEEDFS_PORTS="19333 19380 19388 29383"
MLMD_PORT=8080
KFP_NAMESPACE=kubeflow
# moto accepts any key, SeaweedFS only this one (its one identity); KFP's Secret and config carry it. A loopback
# test identity, not a credential (tests.support.kfp_cluster.S3_KEY signs with it too)
S3_KEY=slipway-cluster
KFP_DAEMONS="mariadb object-store mlmd kfp-apiserver kfp-persistence-agent kfp-scheduledworkflow"
DAEMONS="$K8S_DAEMONS $KFP_DAEMONS"
PERSISTENCE_TOKEN=/var/run/secrets/kubeflow/tokens/persistenceagent-sa-token  # fixed in KFP's agent
PYTHON="$ROOT/.venv/bin/python"

module_dir() {  # module_dir MODULE: its folder in the Go module cache, at the version the cluster build pins
    (cd "$HERE" && GONOSUMDB=github.com/kubeflow/pipelines go_module_dir "$1")
}

start_kfp_stores() {
    [ -x "$PYTHON" ] || die "missing $PYTHON (run: bash .ci/setup)"
    # Every `up` starts with empty stores, as etcd does: the object store lives in memory, and KFP's cache (in its
    # database and ML Metadata) must not point at artifacts of an earlier cluster's object store.
    rm -rf "$STATE/mysql" "$STATE/mlmd.sqlite"; mkdir -p "$STATE/mysql"
    mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" \
        --auth-root-authentication-method=normal >"$RUN/mariadb-install.log" 2>&1 \
        || die "mariadb-install-db failed (log: $RUN/mariadb-install.log)"
    start_daemon mariadb mariadbd --no-defaults --user=root --datadir="$STATE/mysql" \
        --socket="$STATE/mysql.sock" --bind-address="$GATEWAY" --port="$KFP_DB_PORT" --skip-name-resolve \
        --sql-mode=NO_ENGINE_SUBSTITUTION  # KFP's schema migration relies on MySQL's non-strict defaults
    # moto takes the first label of a host name for a bucket (virtual-hosted style) unless told the name is an
    # endpoint: pods reach the store as minio-service.kubeflow, KFP's default
    local endpoints="" name
    for name in minio-service minio-service.$KFP_NAMESPACE minio-service.$KFP_NAMESPACE.svc \
            minio-service.$KFP_NAMESPACE.svc.cluster.local; do endpoints="$endpoints,http://$name:$S3_PORT"; done
    case "$OBJECT_STORE" in
        moto) start_daemon object-store env MOTO_S3_CUSTOM_ENDPOINTS="${endpoints#,}" \
                  "$ROOT/.venv/bin/moto_server" -H "$GATEWAY" -p "$S3_PORT" ;;
        seaweedfs) start_seaweedfs ;;
        *) die "SLIPWAY_KFP_OBJECT_STORE=$OBJECT_STORE: moto or seaweedfs" ;;
    esac
    start_daemon mlmd "$PYTHON" -m slipway.core.lineage.mlmd_server --sqlite "$STATE/mlmd.sqlite" \
        --address "$GATEWAY:$MLMD_PORT"
    wait_for "mariadb" 60 mariadb --no-defaults --socket="$STATE/mysql.sock" -uroot -e "select 1"
    # KFP's API server connects over TCP from its namespace on the bridge
    mariadb --no-defaults --socket="$STATE/mysql.sock" -uroot -e \
        "CREATE USER IF NOT EXISTS 'kfp'@'${POD_CIDR%.0.0/16}.%'; GRANT ALL ON *.* TO 'kfp'@'${POD_CIDR%.0.0/16}.%'"
    # ready once the bucket takes a write (SeaweedFS answers before its volume server has registered)
    wait_for "object-store" 90 env AWS_ACCESS_KEY_ID="$S3_KEY" AWS_SECRET_ACCESS_KEY="$S3_KEY" "$PYTHON" -c "
import boto3
s3 = boto3.client('s3', endpoint_url='http://$GATEWAY:$S3_PORT', region_name='us-east-1')
if 'mlpipeline' not in [b['Name'] for b in s3.list_buckets()['Buckets']]: s3.create_bucket(Bucket='mlpipeline')
s3.put_object(Bucket='mlpipeline', Key='.ready', Body=b''); s3.delete_object(Bucket='mlpipeline', Key='.ready')"
}

start_seaweedfs() {
    # KFP's Deployment runs `weed server -s3 -filer` and adds its admin identity with `weed shell`'s s3.configure;
    # here the identity comes from an S3 config file (the same identity store, no shell session). Only the S3
    # gateway listens on the bridge; master, volume server and filer on loopback. No telemetry (on by default).
    local weed dir="$STATE/seaweedfs" master volume filer s3_grpc
    weed="$(bash "$ROOT/.ci/seaweedfs/build")/weed" || die "SeaweedFS build failed (bash .ci/seaweedfs/build)"
    read -r master volume filer s3_grpc <<<"$SEAWEEDFS_PORTS"
    rm -rf "$dir"; mkdir -p "$dir/data" "$dir/logs"  # empty at every up, as moto's memory is
    (umask 077; printf '{"identities": [{"name": "kubeflow-admin", "actions": ["Admin", "Read", "List", "Tagging",
        "Write"], "credentials": [{"accessKey": "%s", "secretKey": "%s"}]}]}\n' "$S3_KEY" "$S3_KEY" > "$dir/s3.json")
    start_daemon object-store env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY TMPDIR="$dir" \
        "$weed" -logdir="$dir/logs" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
        -master.port="$master" -master.port.grpc="$((master + 10000))" -master.volumePreallocate=false \
        -master.telemetry=false -volume.port="$volume" -volume.port.grpc="$((volume + 10000))" \
        -filer -filer.port="$filer" -filer.port.grpc="$((filer + 10000))" -filer.localSocket="$dir/filer.sock" \
        -s3 -s3.ip.bind="$GATEWAY" -s3.port="$S3_PORT" -s3.port.grpc="$s3_grpc" -s3.port.iceberg=0 \
        -s3.port.lance=0 -s3.localSocket="$dir/s3.sock" -s3.config="$dir/s3.json"
}

host_service() {  # host_service NAME PORT[=TARGET][:NAME]...: a Service without selector whose endpoint is this
    # host (or $ENDPOINT), PORT forwarded to TARGET (default PORT)
    local name="$1" spec ports="" endpoint_ports=""; shift
    for spec in "$@"; do
        local port_spec="${spec%%:*}" port_name="${spec#*:}"
        local port="${port_spec%%=*}" target="${port_spec#*=}"
        [ "$port_name" = "$spec" ] && port_name="p$port"
        ports="$ports{name: $port_name, port: $port, targetPort: $target},"
        endpoint_ports="$endpoint_ports{name: $port_name, port: $target},"
    done
    cat <<EOF
---
apiVersion: v1
kind: Service
metadata: {name: $name, namespace: $KFP_NAMESPACE}
spec: {ports: [${ports%,}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: $name, namespace: $KFP_NAMESPACE}
subsets: [{addresses: [{ip: ${ENDPOINT:-$GATEWAY}}], ports: [${endpoint_ports%,}]}]
EOF
}

apply_kfp_objects() {
    local argo kfp
    argo="$(module_dir github.com/argoproj/argo-workflows/v3)"
    kfp="$(module_dir github.com/kubeflow/pipelines)"
    # CRDs from the modules the binaries were built from (Go's module cache, checked by .ci/cluster/go.sum)
    kubectl_admin create $(printf -- ' -f %s' "$argo"/manifests/base/crds/minimal/argoproj.io_*.yaml) >/dev/null
    kubectl_admin create -f "$kfp/manifests/kustomize/base/pipeline/cluster-scoped/scheduled-workflow-crd.yaml" \
        >/dev/null
    kubectl_admin create namespace "$KFP_NAMESPACE" >/dev/null
    {
        ENDPOINT="$KFP_ADDRESS" host_service ml-pipeline "$KFP_HTTP_PORT:http" "$KFP_GRPC_PORT:grpc"
        host_service minio-service "9000=$S3_PORT:http"  # KFP's own name for its store, SeaweedFS's too in 2.15
        if [ "$OBJECT_STORE" = seaweedfs ]; then
            host_service seaweedfs "8333=$S3_PORT:http-s3" "9000=$S3_PORT:http-s3-compat"  # KFP 2.15+'s name
        fi
        host_service metadata-grpc-service "$MLMD_PORT:grpc-api"
        echo ---
        sed -e "s/@NAMESPACE@/$KFP_NAMESPACE/g" -e "s/@S3_KEY@/$S3_KEY/g" \
            -e "s|@ARGOEXEC@|slipway.local/argoexec:$ARGO_VERSION|g" \
            -e "s|@WORKFLOW_CONTROLLER@|slipway.local/workflow-controller:$ARGO_VERSION|g" \
            "$HERE/kfp-objects.yaml"
    } | kubectl_admin apply -f - >/dev/null
    wait_for "kfp service accounts" 60 kubectl_admin -n "$KFP_NAMESPACE" get serviceaccount pipeline-runner
}

start_kfp_servers() {
    local home="$STATE/kfp-home"
    mkdir -p "$home/.kube" "$STATE/kfp-config" "$(dirname "$PERSISTENCE_TOKEN")"
    cp "$STATE/kfp.kubeconfig" "$home/.kube/config"  # KFP's API server reads its ScheduledWorkflow client from here
    sed "s/@S3_KEY@/$S3_KEY/g" "$HERE/kfp-apiserver.json" > "$STATE/kfp-config/config.json"
    kubectl_admin -n "$KFP_NAMESPACE" create token ml-pipeline-persistenceagent --duration 24h \
        --audience pipelines.kubeflow.org > "$PERSISTENCE_TOKEN"
    local env=(ip netns exec "$KFP_NETNS" env HOME="$home" KUBECONFIG="$STATE/kfp.kubeconfig" POD_NAMESPACE="$KFP_NAMESPACE"
        DBCONFIG_MYSQLCONFIG_HOST="$GATEWAY" DBCONFIG_MYSQLCONFIG_PORT="$KFP_DB_PORT" DBCONFIG_MYSQLCONFIG_USER=kfp
        DBCONFIG_MYSQLCONFIG_PASSWORD= MINIO_SERVICE_SERVICE_HOST="$GATEWAY" MINIO_SERVICE_SERVICE_PORT="$S3_PORT"
        ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_HOST=127.0.0.1 ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_PORT=1
        V2_DRIVER_IMAGE="slipway.local/kfp-driver:$KFP_VERSION"
        V2_LAUNCHER_IMAGE="slipway.local/kfp-launcher:$KFP_VERSION")
    start_daemon kfp-apiserver "${env[@]}" "$BIN/kfp-apiserver" --config "$STATE/kfp-config" \
        --rpcPortFlag ":$KFP_GRPC_PORT" --httpPortFlag ":$KFP_HTTP_PORT" --logtostderr=true
    wait_for "kfp-apiserver" 120 http_ok "http://$KFP_ADDRESS:$KFP_HTTP_PORT/apis/v2beta1/healthz"
    start_daemon kfp-persistence-agent "${env[@]}" "$BIN/kfp-persistence-agent" \
        --kubeconfig "$STATE/kfp.kubeconfig" --namespace "$KFP_NAMESPACE" --mlPipelineAPIServerName "$KFP_ADDRESS" \
        --mlPipelineServiceHttpPort "$KFP_HTTP_PORT" --mlPipelineServiceGRPCPort "$KFP_GRPC_PORT" \
        --ttlSecondsAfterWorkflowFinish 86400
    start_daemon kfp-scheduledworkflow "${env[@]}" "$BIN/kfp-scheduledworkflow" \
        --kubeconfig "$STATE/kfp.kubeconfig" --namespace "$KFP_NAMESPACE" --mlPipelineAPIServerName "$KFP_ADDRESS" \
        --mlPipelineServiceGRPCPort "$KFP_GRPC_PORT"
    wait_for "workflow-controller" 120 sh -c "kubectl --kubeconfig '$STATE/admin.kubeconfig' -n $KFP_NAMESPACE \
        get deploy workflow-controller -o jsonpath='{.status.readyReplicas}' | grep -qx 1"
}
