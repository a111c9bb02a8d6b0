package otelcodex

// ScopeName is the instrumentation scope name of the spans this package
// starts; it equals the import path.
const ScopeName = "github.com/agentledger/agentledger/instrument/otelcodex"

// Version returns the version of this instrumentation.
func Version() string {
	return "0.1.0"
}
