//go:generate go -C ../../tools/mdatagen tool mdatagen ../../extension/invocationstatusextension/metadata.yaml

// Package invocationstatusextension serves the invocation processor's live
// state over HTTP: a JSON API (what an open invocation waits on, whether a
// session still owes work) and a self-refreshing page of open and recently
// closed invocations, with one page per invocation drawing its spans on a
// timeline. The processor publishes to it when its status key names it;
// the extension changes no summary (docs/CONTRACT.md, "Extensions").
//
// Where to start reading: extension.go (the component: Start, Shutdown,
// and PublishInvocations, the processor's StatusSink), then store.go (the
// open and closed views, the session index, the bounds). api.go answers
// the JSON API, watch.go the session watch (a version per session and the
// long poll on it), page.go, timeline.go, chart.go and spark.go the
// pages; guard.go holds the security headers and the Host allow-list, and
// scope.go the tenant scoping. The JSON types and a Go client are in
// statusapi, which imports only the standard library.
package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"
