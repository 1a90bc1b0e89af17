// Package integration holds xds-relay's end-to-end tests (package
// integration_test): real gRPC servers on 127.0.0.1, a go-control-plane
// upstream, and real third-party xDS clients — grpc-go in process,
// @grpc/grpc-js-xds (node/client.js) and Debian's python3-grpcio
// (python/client.py) as subprocesses. Install the latter two with
// .ci/install-clients.sh; without them the tests skip, unless CI=true.
package integration
