#!/bin/sh
# scripts/cluster-bin.sh DIR builds the servers of the cluster's providers
# into DIR from the Go module proxy, for the tests that run mm against them
# (cmd/mm: TestClusterOnEtcd, TestClusterOnKubernetesControlPlane,
# TestDeployOnKubernetesNode, TestClusterOnConsul): etcd, a Kubernetes
# control plane (kube-apiserver, kube-controller-manager, kubectl), what a
# node of its own runs (kube-scheduler, the kubelet, kube-proxy), and
# Consul.
#
#   scripts/cluster-bin.sh /tmp/cluster-bin
#   MM_CLUSTER_BIN=/tmp/cluster-bin go test -run 'TestClusterOn' ./cmd/mm
#
# 7–10 minutes on 2 cores with an empty build cache.
# KUBE_VERSION and ETCD_VERSION choose the versions; ONLY=consul builds
# Consul alone (.ci/run does).
set -eu
dir=$(realpath -m "${1:?usage: scripts/cluster-bin.sh DIR}")
kube=${KUBE_VERSION:-1.32.4}
etcd=${ETCD_VERSION:-3.5.17}
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
mkdir -p "$dir"
export GOWORK=off GOFLAGS=-mod=mod

# A module's own path on the proxy, copied where it can be built.
module() {
  src=$(cd "$work" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp -r "$src" "$work/$2"
  chmod -R u+w "$work/$2"
}

# Consul 1.15.4, under the MPL 2.0 (its releases from August 2023 on are
# under the BUSL, which is not an open licence). Its module replaces its
# own submodules (api, sdk, …) with its folders, which the proxy does not
# carry: use the published ones. The tag's api folder is newer than the
# api v1.21.0 it requires: v1.23.0 (MPL 2.0 too) has all it uses.
consul() {
  module "github.com/hashicorp/consul@v1.15.4" consul
  cd "$work/consul"
  sed -i '/^replace (/,/^)/d' go.mod
  go get github.com/hashicorp/consul/api@v1.23.0
  go build -o "$dir/consul" .
}
if [ "${ONLY:-}" = consul ]; then
  consul
  exit 0
fi

# k8s.io/kubernetes replaces its staging modules (k8s.io/api, …) with its
# own folders, which its module on the proxy does not carry: use the
# ones published under the same version (v0.MINOR.PATCH).
module "k8s.io/kubernetes@v$kube" kubernetes
cd "$work/kubernetes"
sed -i '/=> \.\/staging/d' go.mod
sed -i "s#^\(\tk8s\.io/[a-z-]*\) v0\.0\.0\$#\1 v0.${kube#1.}#" go.mod
go build -o "$dir/" ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kubectl
# A node of its own (TestDeployOnKubernetesNode): the scheduler, the
# kubelet and kube-proxy. KUBE_NODE=0 leaves them out.
if [ "${KUBE_NODE:-1}" != 0 ]; then
  go build -o "$dir/" ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kube-proxy
fi

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

consul

ls "$dir"
