// Command kube is one binary for the Kubernetes node and control-plane programs the single-node cluster runs, and
// etcd 3.5 (Kubernetes 1.32 needs its watch-progress requests; Debian's etcd 3.4.23 lacks them): linking once
// instead of six times saves most of a cold build on two cores. The program is chosen by the name it is called by
// (a symlink kube-apiserver -> kube) or by its first argument (kube kubelet --flags...). Besides them, stop-pods
// (stop_pods.go): what `.ci/kfp-cluster down` stops the pods with.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	_ "time/tzdata"
)

var programs = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 kubelet.NewKubeletCommand,
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := programs[name]; !ok && name != "etcd" && name != "stop-pods" && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	if name == "etcd" {
		etcdmain.Main(os.Args)
		return
	}
	if name == "stop-pods" {
		os.Exit(stopPods(os.Args[1:]))
	}
	program, ok := programs[name]
	if !ok {
		names := []string{"etcd", "stop-pods"}
		for known := range programs {
			names = append(names, known)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "kube: unknown program %q; one of %v\n", name, names)
		os.Exit(2)
	}
	os.Exit(cli.Run(program()))
}
