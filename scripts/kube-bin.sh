#!/bin/sh
# scripts/kube-bin.sh DIR builds a Kubernetes control plane into DIR from
# the Go module proxy: etcd, kube-apiserver, kube-controller-manager and
# kubectl, for TestClusterOnKubernetesControlPlane (cmd/mm):
#
#   scripts/kube-bin.sh /tmp/kube && MM_KUBE_BIN=/tmp/kube go test -run ControlPlane ./cmd/mm
#
# About 10 minutes on 2 cores with an empty build cache.
# KUBE_VERSION and ETCD_VERSION choose the versions.
set -eu
dir=$(realpath -m "${1:?usage: scripts/kube-bin.sh DIR}")
kube=${KUBE_VERSION:-1.32.4}
etcd=${ETCD_VERSION:-3.5.17}
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
mkdir -p "$dir"
export GOWORK=off GOFLAGS=-mod=mod

# k8s.io/kubernetes replaces its staging modules (k8s.io/api, …) with its
# own folders, which its module on the proxy does not carry: use the
# ones published under the same version (v0.MINOR.PATCH).
src=$(cd "$work" && go mod download -json "k8s.io/kubernetes@v$kube" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$src" "$work/kubernetes"
chmod -R u+w "$work/kubernetes"
cd "$work/kubernetes"
sed -i '/=> \.\/staging/d' go.mod
sed -i "s#^\(\tk8s\.io/[a-z-]*\) v0\.0\.0\$#\1 v0.${kube#1.}#" go.mod
go build -o "$dir/" ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kubectl

mkdir "$work/etcd"
cd "$work/etcd"
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
go mod init etcd >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@v$etcd" >/dev/null 2>&1
go build -o "$dir/etcd" .
ls "$dir"
