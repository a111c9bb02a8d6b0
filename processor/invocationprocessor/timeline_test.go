package invocationprocessor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// timelineHarness publishes to a viewSink with status_spans set to limit.
func timelineHarness(t *testing.T, limit int) (*harness, *viewSink) {
	return statusHarness(t, 1, func(c *Config) {
		id := component.MustNewID("invocation_status")
		c.Status = &id
		c.StatusSpans = limit
	})
}

// sums adds up the recorded model calls' tokens, and those of the calls
// that started after the result.
func sums(tl *statusapi.Timeline, v statusapi.Invocation) (in, out, afterIn, afterOut int64) {
	for _, s := range tl.Spans {
		in += s.InputTokens
		out += s.OutputTokens
		if v.ResultAt != nil && s.Start.After(*v.ResultAt) {
			afterIn += s.InputTokens
			afterOut += s.OutputTokens
		}
	}
	return in, out, afterIn, afterOut
}

func TestTimelineRecordsEverySpanOfEveryTrace(t *testing.T) {
	h, views := timelineHarness(t, 1000)
	s := scenario("inv-a", 0)
	root, chat, tool, job, cont, chat2 := s[0], s[1], s[2], s[3], s[4], s[5]

	// The root last: records are kept in arrival order.
	h.consume(batch(chat, tool, job))
	open := views.latest(t, "inv-a")
	require.NotNil(t, open.Timeline)
	assert.Len(t, open.Timeline.Spans, 3)
	assert.Equal(t, 1000, open.Timeline.Limit)

	h.consume(batch(chat, cont, chat2, root)) // chat again: a duplicate
	v := views.latest(t, "inv-a")
	require.Equal(t, statusapi.StatusFinal, v.Status)
	require.NotNil(t, v.Timeline)
	tl := v.Timeline
	require.Len(t, tl.Spans, 6, "a duplicate is not recorded twice")
	assert.Zero(t, tl.Omitted)
	assert.Len(t, open.Timeline.Spans, 3, "a published view keeps its records")

	byName := map[string]statusapi.Span{}
	for _, sp := range tl.Spans {
		byName[sp.Name+"@"+sp.TraceID.String()] = sp
	}
	r := byName["invoke_agent coder@"+tid(1).String()]
	assert.Equal(t, statusapi.RoleRoot, r.Role)
	assert.True(t, r.ParentSpanID.IsZero())
	assert.Equal(t, ts(0).AsTime(), r.Start)
	assert.Equal(t, ts(10).AsTime(), r.End)
	j := byName["background shell@"+tid(1).String()]
	assert.Equal(t, statusapi.RoleBackground, j.Role)
	assert.Equal(t, statusapi.SpanID(sid(3)), j.ParentSpanID)
	assert.True(t, j.End.After(*v.ResultAt), "the job runs past the result")
	c := byName["continue_agent coder@"+tid(2).String()]
	assert.Equal(t, statusapi.RoleContinuation, c.Role)
	assert.Equal(t, statusapi.LinkFollowup, c.Link)
	assert.Equal(t, statusapi.SpanID(sid(4)), c.LinkedSpanID)
	assert.Equal(t, 1, c.Links)
	m := byName["chat@"+tid(2).String()]
	assert.True(t, m.ModelCall)
	assert.EqualValues(t, 50, m.InputTokens)
	assert.EqualValues(t, 5, m.OutputTokens)
	assert.False(t, byName["execute_tool shell@"+tid(1).String()].ModelCall)

	// The records add up to the summary's figures.
	in, out, afterIn, afterOut := sums(tl, v)
	assert.Equal(t, v.Usage.InputTokens, in)
	assert.Equal(t, v.Usage.OutputTokens, out)
	assert.Equal(t, v.AfterResult, statusapi.AfterResult{InputTokens: afterIn, OutputTokens: afterOut})
	sum := h.of("inv-a")
	assert.Equal(t, afterIn, intAttr(sum[len(sum)-1], contract.AttrAfterResultInput))
}

func TestTimelineCapKeepsTheRootAndCountsTheRest(t *testing.T) {
	h, views := timelineHarness(t, 3)
	s := scenario("inv-a", 0)
	h.consume(batch(s[1], s[2], s[3], s[4], s[5], s[0]))
	v := views.latest(t, "inv-a")
	require.NotNil(t, v.Timeline)
	tl := v.Timeline
	require.Len(t, tl.Spans, 4, "three spans and the root, which came last")
	assert.Equal(t, statusapi.RoleRoot, tl.Spans[3].Role)
	assert.EqualValues(t, 2, tl.Omitted, "the continuation and its model call were not recorded")
	assert.Equal(t, 3, tl.Limit)
	assert.Equal(t, statusapi.StatusFinal, v.Status, "the cut changes no summary")
	assert.EqualValues(t, 150, v.Usage.InputTokens)
	inv := h.p.shards[0].invs["inv-a"]
	assert.LessOrEqual(t, cap(inv.rare.timeline.spans), 4, "the records never grow past the cap and the root")
}

func TestTimelineOnlyWithStatus(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.consume(batch(scenario("inv-a", 0)[:3]...))
	inv := h.p.shards[0].invs["inv-a"]
	assert.Nil(t, inv.rare, "nothing is recorded without a status extension")
	assert.Nil(t, inv.timelineView(h.p.rules.timelineSpans))

	h, views := timelineHarness(t, 0)
	h.consume(batch(scenario("inv-a", 0)[:3]...))
	assert.Nil(t, views.latest(t, "inv-a").Timeline, "status_spans 0 records none")
}

func TestTimelineCountedInBytes(t *testing.T) {
	plain := newHarness(t, 1, nil)
	recorded, _ := timelineHarness(t, 1000)
	for _, h := range []*harness{plain, recorded} {
		h.consume(batch(scenario("inv-a", 0)[:4]...))
	}
	a := plain.p.shards[0].invs["inv-a"].approxBytes()
	inv := recorded.p.shards[0].invs["inv-a"]
	assert.Equal(t, a+int64(unsafe.Sizeof(invRare{}))+int64(cap(inv.rare.timeline.spans))*sizeTimelineSpan, inv.approxBytes())
	assert.Greater(t, cap(inv.rare.timeline.spans), 3)
}

func TestTimelineJSON(t *testing.T) {
	h, views := timelineHarness(t, 1000)
	h.consume(batch(scenario("inv-a", 0)...))
	v := views.latest(t, "inv-a")
	b, err := json.Marshal(v.Timeline)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"trace_id":"`+tid(2).String()+`"`)
	assert.Contains(t, string(b), `"linked_span_id":"`+sid(4).String()+`"`)
	assert.Contains(t, string(b), `"role":"continuation"`)
	var back statusapi.Timeline
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, *v.Timeline, back)
}

// TestTimelineCapOnThePage runs the processor into the real extension: an
// invocation with more spans than status_spans is drawn with the cap (and
// its root), and its page says how many spans it does not draw.
func TestTimelineCapOnThePage(t *testing.T) {
	ctx := context.Background()
	f := invocationstatusextension.NewFactory()
	extCfg := f.CreateDefaultConfig().(*invocationstatusextension.Config)
	extCfg.ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	ext, err := f.Create(ctx, extensiontest.NewNopSettings(f.Type()), extCfg)
	require.NoError(t, err)
	require.NoError(t, ext.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, ext.Shutdown(ctx)) })
	addr := ext.(interface{ Addr() net.Addr }).Addr().String()

	h := newHarness(t, 1, func(c *Config) {
		id := component.MustNewID("invocation_status")
		c.Status = &id
		c.StatusSpans = 5
	})
	for _, s := range h.p.shards {
		s.status = ext.(StatusSink)
	}
	const tools = 12
	root := sp{inv: "inv-big", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 50, role: contract.RoleRoot, children: int64(tools)}
	var spans []sp
	for i := range tools {
		spans = append(spans, sp{inv: "inv-big", name: fmt.Sprintf("execute_tool t%d", i), trace: 1, id: uint64(10 + i), parent: 1, start: int64(i), end: int64(i + 1), children: int64(0)})
	}
	h.consume(batch(append(spans, root)...))

	resp, err := http.Get("http://" + addr + "/invocations/inv-big")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	page := string(body)
	assert.Contains(t, page, `data-status="final"`, "the cap changes no summary")
	assert.Equal(t, 6, strings.Count(page, `<g class="span `), "five spans and the root")
	assert.Contains(t, page, `data-role="root"`)
	assert.Contains(t, page, "showing the first 6 of 13 spans: 7 not drawn (the processor records at most status_spans = 5")
	assert.Contains(t, page, "<td class=\"num\">13</td>", "the summary counts every span")
}

func TestTimelineCutCountedInBoundHits(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	id := component.MustNewID("invocation_status")
	cfg.Status, cfg.StatusSpans = &id, 2
	p, err := newProcessor(metadatatest.NewSettings(tt), cfg, consumertest.NewNop(), newFakeClock(), 1)
	require.NoError(t, err)
	s := scenario("inv-a", 0)
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(s[1], s[2], s[3], s[4], s[5], s[0])))
	require.NoError(t, p.Shutdown(context.Background()))
	metadatatest.AssertEqualProcessorInvocationBoundHits(t, tt, []metricdata.DataPoint[int64]{
		{Value: 3, Attributes: attribute.NewSet(attribute.String("bound", boundStatusSpans))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorInvocationSpansIndexed(t, tt, []metricdata.DataPoint[int64]{{Value: 6}}, metricdatatest.IgnoreTimestamp())
}
