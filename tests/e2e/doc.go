// Package e2e holds the end-to-end tests: the real otelcol-agentledger
// binary with the configs in collector-config, real Jaeger, real Prometheus,
// and the reference agent (examples/shellagent). Each test skips with a
// clear message when a binary is missing, unless AGENTLEDGER_E2E=1 (set by
// make test and CI), which makes a missing binary a failure.
//
// Binaries are found through AGENTLEDGER_COLLECTOR_BIN, JAEGER_BIN and
// PROMETHEUS_BIN, falling back to .bin/ and /usr/bin. make test rebuilds the
// collector first; a plain go test runs whatever .bin/ holds, so rebuild it
// (make build) after changing the processor. The reference agent is built
// from source by the tests themselves.
package e2e
