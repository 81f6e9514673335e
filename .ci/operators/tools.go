//go:build tools

// The main packages build builds; imported here so that go.mod and go.sum hold exactly their dependencies.
package tools

import (
	_ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
)
