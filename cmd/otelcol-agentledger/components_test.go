package main

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/agentledger/agentledger/extension/invocationstatusextension"
	"github.com/agentledger/agentledger/processor/invocationprocessor"
)

// The extension the processor's status key names takes the processor's
// state. The check lives here, where both are wired together, so that
// neither module requires the other's (the processor needs only the
// extension's dependency-free statusapi types).
func TestStatusExtensionIsAStatusSink(t *testing.T) {
	f := invocationstatusextension.NewFactory()
	ext, err := f.Create(context.Background(), extensiontest.NewNopSettings(f.Type()), f.CreateDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ext.(invocationprocessor.StatusSink); !ok {
		t.Fatalf("%T does not implement invocationprocessor.StatusSink", ext)
	}
}
