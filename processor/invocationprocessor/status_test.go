package invocationprocessor

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// viewSink is a StatusSink that records every view in the order published.
type viewSink struct {
	mu    sync.Mutex
	views []statusapi.Invocation
}

func (s *viewSink) PublishInvocations(views []statusapi.Invocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views = append(s.views, views...)
}

// latest returns the last view published for id.
func (s *viewSink) latest(t *testing.T, id string) statusapi.Invocation {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.views) - 1; i >= 0; i-- {
		if s.views[i].ID == id {
			return s.views[i]
		}
	}
	t.Fatalf("no view of %s published", id)
	return statusapi.Invocation{}
}

func (s *viewSink) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.views {
		if v.ID == id {
			n++
		}
	}
	return n
}

// statusHarness is a harness whose processor publishes to a viewSink.
func statusHarness(t *testing.T, shards int, mod func(*Config)) (*harness, *viewSink) {
	h := newHarness(t, shards, mod)
	views := &viewSink{}
	for _, s := range h.p.shards {
		s.status = views
	}
	return h, views
}

type extHost struct {
	component.Host
	exts map[component.ID]component.Component
}

func (h extHost) GetExtensions() map[component.ID]component.Component { return h.exts }

type sinkExtension struct {
	component.StartFunc
	component.ShutdownFunc
	viewSink
}

func TestLoadConfigStatus(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.NewIDWithName(metadata.Type, "status").String())
	require.NoError(t, err)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	require.NoError(t, sub.Unmarshal(cfg))
	want := component.MustNewIDWithName("invocation_status", "page")
	require.NotNil(t, cfg.Status)
	assert.Equal(t, want, *cfg.Status)
	assert.Nil(t, createDefaultConfig().(*Config).Status, "publishing is off by default")
}

func TestStatusStartFindsExtension(t *testing.T) {
	id := component.MustNewID("invocation_status")
	start := func(exts map[component.ID]component.Component) (*invocationProcessor, error) {
		cfg := createDefaultConfig().(*Config)
		cfg.Status = &id
		p, err := newProcessor(settingsForTest(), cfg, nil, newFakeClock(), 1)
		require.NoError(t, err)
		err = p.Start(context.Background(), extHost{Host: componenttest.NewNopHost(), exts: exts})
		t.Cleanup(func() { require.NoError(t, p.Shutdown(context.Background())) })
		return p, err
	}

	_, err := start(nil)
	require.ErrorContains(t, err, `status: extension "invocation_status" is not configured`)

	_, err = start(map[component.ID]component.Component{id: struct {
		component.StartFunc
		component.ShutdownFunc
	}{}})
	require.ErrorContains(t, err, "does not take invocation state")

	ext := &sinkExtension{}
	p, err := start(map[component.ID]component.Component{id: ext})
	require.NoError(t, err)
	for _, s := range p.shards {
		assert.Same(t, StatusSink(ext), s.status)
	}
}

// TestStatusFollowsBackgroundInvocation publishes the canonical invocation
// in three steps: while its job runs (a missing child), while its followup
// is expected, and once final.
func TestStatusFollowsBackgroundInvocation(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	s := scenario("inv-a", 0)
	root, chat, tool, job, cont, chat2 := s[0], s[1], s[2], s[3], s[4], s[5]
	opened := h.clock.Now()

	h.consume(batch(root, chat, tool))
	v := views.latest(t, "inv-a")
	assert.Equal(t, statusapi.StatusPending, v.Status)
	assert.True(t, v.Open())
	assert.Equal(t, "conv-1", v.Session)
	assert.Equal(t, "coder", v.Agent)
	assert.Equal(t, "agent", v.Service)
	assert.Equal(t, ts(0).AsTime(), v.Started)
	require.NotNil(t, v.ResultAt)
	assert.Equal(t, ts(10).AsTime(), *v.ResultAt)
	assert.Equal(t, statusapi.Usage{InputTokens: 100, OutputTokens: 10}, v.Usage)
	assert.Equal(t, []string{tid(1).String()}, v.TraceIDs)
	assert.Equal(t, []string{contract.ReasonMissingChildren + ":execute_tool shell"}, v.Reasons)
	require.NotNil(t, v.Waiting)
	assert.Equal(t, []statusapi.MissingChildren{{Parent: "execute_tool shell", Missing: 1, Parents: 1}}, v.Waiting.MissingChildren)
	assert.Empty(t, v.Waiting.ExpectedFollowups)
	assert.Nil(t, v.Waiting.RemoteSettling)
	assert.False(t, v.Waiting.RootMissing)
	assert.Equal(t, opened.Add(4*time.Hour), v.Waiting.OpenTimeoutAt)
	assert.True(t, v.Waiting.OwesWork(), "a job still running is owed work")

	h.clock.Advance(time.Second)
	h.consume(batch(job))
	v = views.latest(t, "inv-a")
	assert.Equal(t, statusapi.StatusPending, v.Status)
	assert.Empty(t, v.Waiting.MissingChildren)
	assert.Equal(t, []statusapi.ExpectedFollowup{{
		Job: "background shell", SpanID: sid(4).String(), Started: ts(3).AsTime(), Ended: ts(20).AsTime(), Missing: 1,
	}}, v.Waiting.ExpectedFollowups)
	assert.Equal(t, []string{contract.ReasonOpenFollowup + ":background shell"}, v.Reasons)
	assert.Equal(t, opened.Add(4*time.Hour), v.Waiting.OpenTimeoutAt, "the deadline counts from the first arrival")
	assert.True(t, v.Waiting.OwesWork())

	closedAt := h.clock.Advance(time.Second)
	h.consume(batch(cont, chat2))
	v = views.latest(t, "inv-a")
	assert.Equal(t, statusapi.StatusFinal, v.Status)
	assert.False(t, v.Open())
	assert.EqualValues(t, 1, v.Revision)
	assert.Nil(t, v.Waiting)
	assert.Empty(t, v.Reasons)
	require.NotNil(t, v.ClosedAt)
	assert.Equal(t, closedAt, *v.ClosedAt)
	assert.Equal(t, statusapi.Usage{InputTokens: 150, OutputTokens: 15}, v.Usage)
	assert.Equal(t, statusapi.AfterResult{InputTokens: 50, OutputTokens: 5}, v.AfterResult)
	assert.EqualValues(t, 2, v.ModelCalls)
	assert.EqualValues(t, 1, v.BackgroundJobs)
	assert.EqualValues(t, 1, v.Continuations)
	assert.EqualValues(t, 6, v.Spans)
	assert.Equal(t, []string{tid(1).String(), tid(2).String()}, v.TraceIDs)

	// The closed view agrees with the final summary span.
	sums := h.of("inv-a")
	last := sums[len(sums)-1]
	assert.Equal(t, string(v.Status), strAttr(last, contract.AttrStatus))
	assert.Equal(t, v.Usage.InputTokens, intAttr(last, contract.AttrUsageInputTokens))
	assert.Equal(t, v.AfterResult.OutputTokens, intAttr(last, contract.AttrAfterResultOutput))
	// One view per batch that changed it: three.
	assert.Equal(t, 3, views.count("inv-a"))

	// A duplicate after the close changes nothing and publishes nothing.
	h.consume(batch(chat2))
	assert.Equal(t, 3, views.count("inv-a"))
}

func TestStatusRemoteSettlingThenFinalOnTick(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	root := sp{inv: "inv-r", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 5, role: contract.RoleRoot,
		children: int64(1), extra: map[string]any{contract.AttrConversationID: "conv-r"}}
	tool := sp{inv: "inv-r", name: "execute_tool shell", trace: 1, id: 2, parent: 1, start: 1, end: 2, children: int64(0), remote: true}
	arrived := h.clock.Now()
	h.consume(batch(root, tool))
	v := views.latest(t, "inv-r")
	require.NotNil(t, v.Waiting)
	require.NotNil(t, v.Waiting.RemoteSettling)
	assert.Equal(t, []string{"execute_tool shell"}, v.Waiting.RemoteSettling.Spans)
	assert.Equal(t, arrived.Add(2*time.Second), v.Waiting.RemoteSettling.Until)
	// v0.12: an unsettled remote subtree is owed work (its process may
	// still send spans).
	assert.True(t, v.Waiting.OwesWork(), "a remote subtree settling is work the session owes")
	require.Len(t, v.Waiting.Owed, 1)
	assert.Equal(t, contract.ReasonRemoteSettling+":execute_tool shell", v.Waiting.Owed[0].Reason)

	h.advance(time.Second)
	assert.Equal(t, statusapi.StatusPending, views.latest(t, "inv-r").Status, "not settled yet")
	h.advance(time.Second)
	v = views.latest(t, "inv-r")
	assert.Equal(t, statusapi.StatusFinal, v.Status, "the timer's close is published")
	assert.Nil(t, v.Waiting)
}

func TestStatusRootMissingAndShutdown(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	s := scenario("inv-s", 0)
	h.consume(batch(s[1], s[2]))
	v := views.latest(t, "inv-s")
	assert.True(t, v.Waiting.RootMissing)
	assert.Empty(t, v.Session, "the session is known from the root")
	assert.Equal(t, ts(1).AsTime(), v.Started, "earliest span start while the root is missing")
	assert.Nil(t, v.ResultAt)

	h.shutdown()
	v = views.latest(t, "inv-s")
	assert.Equal(t, statusapi.StatusIncomplete, v.Status)
	assert.Contains(t, v.Reasons, contract.ReasonShutdown)
	assert.Contains(t, v.Reasons, contract.ReasonRootMissing)
}

func TestStatusEvictionAndRevision(t *testing.T) {
	h, views := statusHarness(t, 1, func(c *Config) { c.MaxOpenInvocations = 1 })
	a, b := scenario("inv-a", 0), scenario("inv-b", 100)
	h.consume(batch(a[0], a[1], a[2]))
	h.consume(batch(b[0], b[1], b[2]))
	v := views.latest(t, "inv-a")
	assert.Equal(t, statusapi.StatusIncomplete, v.Status)
	assert.Contains(t, v.Reasons, contract.ReasonEvicted)
	assert.Equal(t, statusapi.StatusPending, views.latest(t, "inv-b").Status)

	// The evicted invocation's missing spans arrive: a final revision 2.
	h.consume(batch(a[3], a[4], a[5]))
	v = views.latest(t, "inv-a")
	assert.Equal(t, statusapi.StatusFinal, v.Status)
	assert.EqualValues(t, 2, v.Revision)
	assert.Contains(t, v.Anomalies, contract.AnomalyLateSpan+":background shell")
}

func TestStatusWaitingIsBounded(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	spans := []sp{{inv: "inv-big", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 5, role: contract.RoleRoot,
		children: int64(2 * (maxWaitEntries + 8)), extra: map[string]any{contract.AttrConversationID: "conv-big"}}}
	for i := range maxWaitEntries + 8 {
		id := uint64(10 + 2*i)
		spans = append(spans,
			sp{inv: "inv-big", name: fmt.Sprintf("execute_tool t%02d", i), trace: 1, id: id, parent: 1, start: 1, end: 2, children: int64(1)},
			sp{inv: "inv-big", name: "background shell", trace: 1, id: id + 1, parent: 1, start: int64(i), end: 3,
				role: contract.RoleBackground, children: int64(0), followups: int64(1)})
	}
	h.consume(batch(spans...))
	w := views.latest(t, "inv-big").Waiting
	require.NotNil(t, w)
	assert.Len(t, w.MissingChildren, maxWaitEntries)
	assert.Len(t, w.ExpectedFollowups, maxWaitEntries)
	assert.Equal(t, 16, w.Truncated)
	assert.Equal(t, "execute_tool t00", w.MissingChildren[0].Parent, "sorted by parent name before truncation")
	assert.Equal(t, ts(0).AsTime(), w.ExpectedFollowups[0].Started, "oldest followup first")
}

func TestStatusOffPublishesNothing(t *testing.T) {
	h := newHarness(t, 1, nil)
	require.Nil(t, h.p.shards[0].status)
	h.consume(batch(scenario("inv-off", 0)...))
	require.Len(t, h.of("inv-off"), 1)
}

// BenchmarkConsumeTracesStatus measures what publishing to the
// invocation_status extension adds: mode=invocation is the processor
// without a status key, mode=status publishes every invocation's views to
// a real extension. halves=true delivers each invocation in two batches
// (the continuation and the job first, then the rest), so every invocation
// is also published open once. Compare with benchstat -col /mode.
func BenchmarkConsumeTracesStatus(b *testing.B) {
	ctx := context.Background()
	for _, halves := range []bool{false, true} {
		batches := benchBatches(64)
		if halves {
			var split []ptrace.Traces
			for _, td := range batches {
				first, second := ptrace.NewTraces(), ptrace.NewTraces()
				td.CopyTo(first)
				td.CopyTo(second)
				// Each invocation's six spans are adjacent, last first.
				i := 0
				first.ResourceSpans().At(0).ScopeSpans().At(0).Spans().RemoveIf(func(ptrace.Span) bool { i++; return (i-1)%6 >= 3 })
				i = 0
				second.ResourceSpans().At(0).ScopeSpans().At(0).Spans().RemoveIf(func(ptrace.Span) bool { i++; return (i-1)%6 < 3 })
				split = append(split, first, second)
			}
			batches = split
		}
		for _, mode := range []string{"invocation", "status"} {
			b.Run(fmt.Sprintf("halves=%v/mode=%s", halves, mode), func(b *testing.B) {
				cfg := createDefaultConfig().(*Config)
				cfg.Retention = 0
				if mode == "status" {
					id := component.MustNewID("invocation_status")
					cfg.Status = &id // records spans for the timeline too (status_spans)
				}
				p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
				require.NoError(b, err)
				if mode == "status" {
					f := invocationstatusextension.NewFactory()
					ext, err := f.Create(ctx, extensiontest.NewNopSettings(f.Type()), f.CreateDefaultConfig())
					require.NoError(b, err)
					for _, s := range p.shards {
						s.status = ext.(StatusSink)
					}
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if err := p.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
						b.Fatal(err)
					}
				}
				require.NoError(b, p.Shutdown(ctx))
			})
		}
	}
}
