// Package deploy holds xds-relay's deployment artifacts, not Go code: the
// container image (Dockerfile), a kustomize base for Kubernetes (kubernetes/),
// a Grafana dashboard (grafana/), Prometheus alerting rules (prometheus/) and
// example client bootstraps that point at the relay (bootstraps/).
//
// The package's tests (deploy_test.go) decode every manifest strictly into
// the Kubernetes API types, every Envoy bootstrap into envoy's Bootstrap proto
// (and validate it), every gRPC bootstrap with grpc-go's own parser, and check
// that every metric the dashboard and the alerts use exists in the relay's
// registry and that the ConfigMap's relay config is valid. See
// docs/OPERATIONS.md for how to use them.
package deploy
