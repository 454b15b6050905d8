// Package flowstate is the root of the flowstate module. It holds the
// release's version, read from the VERSION file beside it, the one place a
// release's number is written: the worker reports it (worker --version, the
// flowstate_build_info metric, its NATS micro service), and the Makefile
// stamps the image, the chart and the release archives with it. A test of
// this package fails when another place that names the version (the chart,
// the Rust crate, the changelog) disagrees.
//
// The version follows semantic versioning and stays below 1.0.0 while the
// wire contract (docs/PROTOCOL.md) may still change; the minor number
// follows the protocol version a release speaks (0.3.x speaks protocol v3).
package flowstate

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release's version, such as "0.3.0", without a leading v.
func Version() string { return strings.TrimSpace(versionFile) }
