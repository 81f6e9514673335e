package main

// stop-pods stops every pod the container runtime holds, through the CRI as the kubelet does when it deletes a
// pod: each container with a grace period (SIGTERM, then SIGKILL at its end), then the pod's sandbox (its pause
// process and network), then its record. `.ci/kfp-cluster down` calls it after the kubelet stopped (which would
// start the pods again) and before containerd stops: containerd's shims outlive containerd, and the pods with them.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

func stopPods(args []string) int {
	flags := flag.NewFlagSet("stop-pods", flag.ContinueOnError)
	endpoint := flags.String("endpoint", "", "the runtime's CRI socket (unix:///path/containerd.sock)")
	grace := flags.Int64("grace", 10, "seconds each container has to stop after SIGTERM")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "stop-pods: --endpoint is required")
		return 2
	}
	runtime, err := remote.NewRemoteRuntimeService(*endpoint, 10*time.Second, nil, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stop-pods: cannot reach %s: %v\n", *endpoint, err)
		return 1
	}
	ctx := context.Background()
	pods, err := runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stop-pods: listing pods: %v\n", err)
		return 1
	}
	containers, err := runtime.ListContainers(ctx, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stop-pods: listing containers: %v\n", err)
		return 1
	}
	// All at once, as the pods share one grace period: one at a time, every slow pod would add its own.
	failures := make(chan error, len(pods))
	var group sync.WaitGroup
	for _, pod := range pods {
		group.Add(1)
		go func(pod *runtimeapi.PodSandbox) {
			defer group.Done()
			if err := stopPod(ctx, runtime, pod, containers, *grace); err != nil {
				failures <- err
			}
		}(pod)
	}
	group.Wait()
	close(failures)
	failed := 0
	for err := range failures {
		fmt.Fprintf(os.Stderr, "stop-pods: %v\n", err)
		failed++
	}
	running := 0
	for _, container := range containers {
		if container.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running++
		}
	}
	fmt.Printf("stopped %d pods (%d running containers)\n", len(pods)-failed, running)
	if failed > 0 {
		return 1
	}
	return 0
}

type podRuntime interface {
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
}

func stopPod(ctx context.Context, runtime podRuntime, pod *runtimeapi.PodSandbox,
	containers []*runtimeapi.Container, grace int64) error {
	name := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
	for _, container := range containers {
		if container.GetPodSandboxId() != pod.GetId() || container.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if err := runtime.StopContainer(ctx, container.GetId(), grace); err != nil {
			return fmt.Errorf("pod %s: container %s: %v", name, container.GetMetadata().GetName(), err)
		}
	}
	if err := runtime.StopPodSandbox(ctx, pod.GetId()); err != nil {
		return fmt.Errorf("pod %s: stopping its sandbox: %v", name, err)
	}
	if err := runtime.RemovePodSandbox(ctx, pod.GetId()); err != nil {
		return fmt.Errorf("pod %s: removing its sandbox: %v", name, err)
	}
	return nil
}
