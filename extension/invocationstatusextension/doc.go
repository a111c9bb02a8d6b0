//go:generate go -C ../../tools/mdatagen tool mdatagen ../../extension/invocationstatusextension/metadata.yaml

// Package invocationstatusextension serves the invocation processor's live
// state over HTTP: a JSON API (what an open invocation waits on, whether a
// session still owes work) and a self-refreshing page of open and recently
// closed invocations. The processor publishes to it when its status key
// names it.
package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"
