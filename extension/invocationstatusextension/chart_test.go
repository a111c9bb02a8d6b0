package invocationstatusextension

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// A model call of a few milliseconds before a result that comes seconds
// later, on an axis of a minute: its bar is wide enough to see, keeps to
// its side of the result line, and its token note does not run across
// the line.
func TestChartShortPreResultSpans(t *testing.T) {
	v := closedView("inv-short", "s1", statusapi.StatusFinal, 1, time.Hour)
	at := func(ms int) time.Time { return v.Started.Add(time.Duration(ms) * time.Millisecond) }
	resultAt := at(400)
	v.ResultAt = &resultAt
	v.Timeline = &statusapi.Timeline{Limit: 1000, Spans: []statusapi.Span{
		{TraceID: traceN(1), SpanID: spanN(1), Name: "invoke_agent coder", Role: statusapi.RoleRoot, Start: at(0), End: at(400)},
		{TraceID: traceN(1), SpanID: spanN(2), ParentSpanID: spanN(1), Name: "chat gpt-test", Start: at(10), End: at(14), ModelCall: true, InputTokens: 123456, OutputTokens: 789},
		{TraceID: traceN(1), SpanID: spanN(3), ParentSpanID: spanN(1), Name: "background shell", Role: statusapi.RoleBackground, Start: at(20), End: at(60000)},
	}}
	c := layoutChart(&v, v.Started.Add(time.Hour))
	if !c.HasResult {
		t.Fatal("no result line")
	}
	var call chartRow
	for _, r := range c.Lanes[0].Rows {
		if r.Span.SpanID == spanN(2) {
			call = r
		}
	}
	// The result at 0.4 s of 60 s: the time before it gets a fifth of
	// the axis, and the ticks name the result's offset.
	if !c.Stretched || math.Abs(c.ResultX-(c.AxisX+chartPreResult*c.AxisW)) > 0.01 {
		t.Errorf("result line at %.1f (stretched %v), want %.1f", c.ResultX, c.Stretched, c.AxisX+chartPreResult*c.AxisW)
	}
	if got := c.Ticks[1]; got.Label != "+400ms" || got.X != c.ResultX {
		t.Errorf("second tick %+v, want +400ms at the result line", got)
	}
	for i := 1; i < len(c.Ticks); i++ {
		if c.Ticks[i].X <= c.Ticks[i-1].X {
			t.Errorf("ticks not in order: %+v", c.Ticks)
		}
	}
	if call.W < chartMinBar || call.X+call.W > c.ResultX {
		t.Errorf("the pre-result call's bar [%.1f, %.1f] is invisible or crosses the result line at %.1f", call.X, call.X+call.W, c.ResultX)
	}
	if call.W < min(chartMinBar, c.ResultX-call.X) {
		t.Errorf("the pre-result call's bar is %.1f px wide, want at least %.1f", call.W, min(chartMinBar, c.ResultX-call.X))
	}
	noteEnd := call.NoteX + float64(len(call.Note))*chartCharW
	if call.NoteX < c.ResultX && noteEnd > c.ResultX {
		t.Errorf("the note %q spans [%.1f, %.1f] across the result line at %.1f", call.Note, call.NoteX, noteEnd, c.ResultX)
	}
	// Drawn: what the legend lists.
	for _, k := range []string{"root", "model", "background"} {
		if !c.Drawn[k] {
			t.Errorf("Drawn lacks %s: %v", k, c.Drawn)
		}
	}
	for _, k := range []string{"continuation", "followup-closed", "after-result", "tool"} {
		if c.Drawn[k] {
			t.Errorf("Drawn has %s, which the chart does not draw: %v", k, c.Drawn)
		}
	}
}

// The legend lists the kinds the chart draws and no other.
func TestTimelineLegendListsWhatIsDrawn(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	v := closedView("inv-plain", "s1", statusapi.StatusFinal, 1, time.Hour)
	resultAt := v.Started.Add(time.Second)
	v.ResultAt = &resultAt
	v.Timeline = &statusapi.Timeline{Limit: 1000, Spans: []statusapi.Span{
		{TraceID: traceN(1), SpanID: spanN(1), Name: "invoke_agent coder", Role: statusapi.RoleRoot, Start: v.Started, End: resultAt},
		{TraceID: traceN(1), SpanID: spanN(2), ParentSpanID: spanN(1), Name: "chat gpt-test", Start: v.Started, End: resultAt, ModelCall: true, InputTokens: 1, OutputTokens: 1},
	}}
	e.PublishInvocations([]statusapi.Invocation{v})
	_, body := get(t, srv, "/invocations/inv-plain")
	page := string(body)
	for _, want := range []string{`<i class="root"></i>root`, `<i class="model"></i>model call`} {
		if !strings.Contains(page, want) {
			t.Errorf("legend lacks %q", want)
		}
	}
	for _, not := range []string{"background job", "continuation</span>", "followup closed", "model call after the result", `<i class="tool">`} {
		if strings.Contains(page, not) {
			t.Errorf("legend lists %q, which is not drawn", not)
		}
	}
}
