package invocationprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
)

func TestStorageStartFailsClearly(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	id := testStorageID
	cfg.Storage = &id
	p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 1)
	require.NoError(t, err)
	err = p.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, `storage extension "file_storage/test" is not configured`)

	notStorage := struct {
		component.StartFunc
		component.ShutdownFunc
	}{}
	err = p.Start(context.Background(), hostWith{testStorageID: notStorage})
	require.ErrorContains(t, err, `extension "file_storage/test" is not a storage extension`)

	// Before Start nothing is indexed: there is no state to add to yet.
	require.ErrorIs(t, p.ConsumeTraces(context.Background(), batch(scenario("inv", 0)[0])), errNotStarted)
}

// A graceful restart emits no shutdown incompletes: the open invocation is
// loaded back and finishes final with exact totals.
func TestStorageGracefulRestartKeepsOpenInvocations(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	s := scenario("inv-1", 0)

	h := newStoredHarness(t, mem, clk, sink, nil)
	h.consume(batch(s[0], s[1], s[2], s[3])) // root, chat, tool, job: pending
	h.shutdown()
	require.Len(t, h.of("inv-1"), 1)
	assert.Equal(t, contract.StatusPending, strAttr(h.of("inv-1")[0], contract.AttrStatus))

	clk.Advance(time.Minute)
	h2 := newStoredHarness(t, mem, clk, sink, nil)
	h2.consume(batch(s[4], s[5])) // the continuation
	sums := h2.of("inv-1")
	require.Len(t, sums, 2, "pending before the restart, final after it")
	final := sums[1]
	assert.Equal(t, contract.StatusFinal, strAttr(final, contract.AttrStatus))
	assert.Equal(t, int64(1), intAttr(final, contract.AttrRevision))
	assert.Equal(t, int64(150), intAttr(final, contract.AttrUsageInputTokens))
	assert.Equal(t, int64(15), intAttr(final, contract.AttrUsageOutputTokens))
	assert.Equal(t, int64(50), intAttr(final, contract.AttrAfterResultInput))
	assert.Equal(t, int64(6), intAttr(final, contract.AttrSpans))
	assert.Equal(t, int64(2), intAttr(final, contract.AttrTraces))
	assert.Equal(t, "agent", func() string {
		v, _ := sink.AllTraces()[len(sink.AllTraces())-1].ResourceSpans().At(0).Resource().Attributes().Get("service.name")
		return v.AsString()
	}())
	h2.shutdown()
}

// After a restart the status extension gets the views of the loaded
// invocations: open ones as they stand, closed ones with their status.
func TestStoragePublishesRestoredViews(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	h := newStoredHarness(t, mem, clk, sink, nil)
	open, done := scenario("inv-open", 0), scenario("inv-done", 100)
	h.consume(batch(open[0], open[1], open[2], open[3]))
	h.consume(batch(done...))
	h.shutdown()

	statusID := component.MustNewID("invocation_status")
	cfg := createDefaultConfig().(*Config)
	storageID := testStorageID
	cfg.Storage, cfg.Status = &storageID, &statusID
	p, err := newProcessor(settingsForTest(), cfg, sink, clk, 2)
	require.NoError(t, err)
	views := &sinkExtension{}
	require.NoError(t, p.Start(context.Background(), hostWith{testStorageID: &memExtension{client: mem}, statusID: views}))
	defer func() { require.NoError(t, p.Shutdown(context.Background())) }()
	got := map[string]string{}
	views.mu.Lock()
	for _, v := range views.views {
		got[v.ID] = string(v.Status)
	}
	views.mu.Unlock()
	assert.Equal(t, map[string]string{"inv-open": contract.StatusPending, "inv-done": contract.StatusFinal}, got)
}
