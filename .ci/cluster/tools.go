//go:build tools

// The upstream programs built from this module besides cmd/kube: listed here so that `go mod tidy` keeps them
// in the build list, which Kubernetes, KFP and Argo share (their common dependencies compile once).
package tools

import (
	_ "github.com/argoproj/argo-workflows/v3/cmd/argoexec"
	_ "github.com/argoproj/argo-workflows/v3/cmd/workflow-controller"
	_ "github.com/kubeflow/pipelines/backend/src/agent/persistence"
	_ "github.com/kubeflow/pipelines/backend/src/apiserver"
	_ "github.com/kubeflow/pipelines/backend/src/crd/controller/scheduledworkflow"
	_ "github.com/kubeflow/pipelines/backend/src/v2/cmd/driver"
	_ "github.com/kubeflow/pipelines/backend/src/v2/cmd/launcher-v2"
)
