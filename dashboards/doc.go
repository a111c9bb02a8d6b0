// Package dashboards builds agentledger's Grafana dashboards as code with the
// Grafana Foundation SDK: an overview of token usage and invocation finality
// from Prometheus, and an invocation drill-down that lists
// invocation.summary spans from Jaeger with a link into each trace.
//
// The generated JSON is committed next to this file (overview.json,
// invocation.json) for Grafana's file provisioning (see provisioning/ and
// README.md). Regenerate it after changing a builder:
//
//	go generate ./dashboards/...
//
// Panels lists every panel's query so that an end-to-end test can run each
// one against a live Prometheus or Jaeger.
package dashboards

//go:generate go run ./gen
