// The upstream Kubeflow modules whose API schemas Slipway's objects are checked against, at the versions the
// project targets: the one place those versions are named. Nothing is built from this module; `go mod download`
// fetches each module's zip into the Go module cache, checked against go.sum, and slipway/core/kube/upstream.py reads
// the CRDs and API documents from there (README.md beside this file). Build modules elsewhere in the project
// (.ci/cluster) that require one of these modules must require the same version (tests/test_upstream.py).
module slipway.local/upstream

go 1.24

require (
	// KServe: the InferenceService CRD (config/crd/full)
	github.com/kserve/kserve v0.20.0
	// Katib: the Experiment and Trial CRDs and its OpenAPI document (api/openapi-spec)
	github.com/kubeflow/katib v0.19.0
	// MPI Operator: the MPIJob v2beta1 CRD (manifests/base)
	github.com/kubeflow/mpi-operator v0.8.2
	// Kubeflow Pipelines 2.14.3 (its tags carry no "v": the pseudo-version of the tag's commit fc3214d4):
	// the v2beta1 REST API document (backend/api/v2beta1/swagger)
	github.com/kubeflow/pipelines v0.0.0-20250902140602-fc3214d4b4d3
)
