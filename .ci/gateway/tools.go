//go:build tools

// The main package build builds; imported here so that go.mod and go.sum hold exactly its dependencies.
package tools

import (
	_ "github.com/traefik/traefik/v3/cmd/traefik"
)
