//go:build tools

// The main packages build builds; imported here so that go.mod and go.sum hold exactly their dependencies.
package tools

import (
	_ "github.com/kubeflow/katib/cmd/db-manager/v1beta1"
	_ "github.com/kubeflow/katib/cmd/katib-controller/v1beta1"
	_ "github.com/kubeflow/katib/cmd/metricscollector/v1beta1/file-metricscollector"
	_ "github.com/kubeflow/katib/cmd/suggestion/goptuna/v1beta1"
	_ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
)
