// Package deploytest checks the deployment files of deploy/: the Helm chart
// (rendered with helm and decoded strictly into the Kubernetes API types),
// the systemd unit (systemd-analyze verify) and the OCI image (built with
// podman or buildah). It is a module of its own so that the worker's module
// takes no Kubernetes or Helm dependency; `make deploy-test` runs it.
package deploytest
