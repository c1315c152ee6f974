//go:build tools

// Package tools pins the Go module's development tools (staticcheck) apart from the package's
// own go.mod, which stays on Go 1.22 with go-redis as its only dependency: honnef.co/go/tools
// v0.8.2 needs Go 1.26. Run it as `go run -modfile=tools/go.mod honnef.co/go/tools/cmd/staticcheck`
// or, from here, `go run honnef.co/go/tools/cmd/staticcheck ../...`.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
