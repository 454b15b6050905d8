//go:build tools

// Package deploytest pins the helm command that renders the chart under
// deploy/helm; it is built from this module so that the worker's own module
// takes no Kubernetes or Helm dependency.
package deploytest

import _ "helm.sh/helm/v4/cmd/helm"
