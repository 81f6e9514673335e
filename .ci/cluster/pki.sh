# Certificates and kubeconfigs of the single-node cluster (sourced by .ci/kfp-cluster): one CA, the API server's
# serving certificate, a client certificate per component, the service-account signing key. Made once per state
# folder; `down --purge` removes them.

cert() {  # cert NAME SUBJECT [SANS]: a key and a certificate signed by the cluster CA
    local name="$1" subject="$2" sans="${3:-}" ext
    ext="$PKI/$name.ext"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "$sans" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
        else echo "extendedKeyUsage=clientAuth"; fi
    } > "$ext"
    openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
        -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$ext"
}

kubeconfig() {  # kubeconfig NAME: a kubeconfig using NAME's client certificate
    cat > "$STATE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: slipway
  cluster:
    certificate-authority: $PKI/ca.crt
    server: https://$GATEWAY:$API_PORT
users:
- name: $1
  user:
    client-certificate: $PKI/$1.crt
    client-key: $PKI/$1.key
contexts:
- name: slipway
  context: {cluster: slipway, user: $1}
current-context: slipway
EOF
}

make_pki() {
    [ -f "$PKI/done" ] && [ "$(cat "$PKI/done")" = "$GATEWAY" ] && return 0  # made for this address
    rm -rf "$PKI"; mkdir -p "$PKI"
    openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=slipway-cluster-ca" -days 3650 -out "$PKI/ca.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    cert apiserver "/CN=kube-apiserver" "IP:$GATEWAY,IP:127.0.0.1,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    cert admin "/O=system:masters/CN=slipway-admin"
    cert controller-manager "/CN=system:kube-controller-manager"
    cert scheduler "/CN=system:kube-scheduler"
    cert kubelet "/O=system:nodes/CN=system:node:$NODE" "IP:$GATEWAY,DNS:$NODE"
    cert kube-proxy "/CN=system:kube-proxy"
    cert kfp "/O=system:masters/CN=kfp-backend"  # KFP's API server, agents and Argo's controller, run on the host
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    for name in admin controller-manager scheduler kubelet kube-proxy kfp; do kubeconfig "$name"; done
    echo "$GATEWAY" > "$PKI/done"
}
