// Package version holds the build's identity, set at link time with -ldflags -X.
package version

import "runtime"

var (
	// Version is the release version, e.g. v0.1.0. Set with -X at build time.
	Version = "dev"
	// Revision is the VCS revision the binary was built from. Set with -X at build time.
	Revision = "unknown"
)

// GoVersion is the Go toolchain the binary was built with.
func GoVersion() string { return runtime.Version() }
