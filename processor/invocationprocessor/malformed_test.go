package invocationprocessor

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// withRepeat returns td with one more attribute appended to the span
// named spanName: key again, with the OTLP JSON value val (e.g.
// {"intValue":"1"}). pdata's Put* replace a key; OTLP allows a repeat,
// and the JSON unmarshaler keeps it, as a receiver would.
func withRepeat(t testing.TB, td ptrace.Traces, spanName, key string, val map[string]any) ptrace.Traces {
	t.Helper()
	raw, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	found := false
	for _, rs := range doc["resourceSpans"].([]any) {
		for _, ss := range rs.(map[string]any)["scopeSpans"].([]any) {
			for _, s := range ss.(map[string]any)["spans"].([]any) {
				span := s.(map[string]any)
				if span["name"] != spanName {
					continue
				}
				attrs, _ := span["attributes"].([]any)
				span["attributes"] = append(attrs, map[string]any{"key": key, "value": val})
				found = true
			}
		}
	}
	require.True(t, found, "no span %q", spanName)
	raw, err = json.Marshal(doc)
	require.NoError(t, err)
	out, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(raw)
	require.NoError(t, err)
	n := 0
	forSpans(out, func(_ pcommon.Resource, s ptrace.Span) {
		if s.Name() != spanName {
			return
		}
		for k := range s.Attributes().All() {
			if k == key {
				n++
			}
		}
	})
	require.GreaterOrEqual(t, n, 2, "the repeat of %s did not survive", key)
	return out
}

// Issue 19, finding 1: a key repeated with different values is malformed,
// live and after a graceful restart alike (the journal replays the stored
// attributes, repeats included, through the same reader).
func TestRepeatedKeyMalformedAcrossRestart(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	s := scenario("inv-1", 0)
	s[0].children = int64(2)
	// root and chat only: the root declares 2 and then 1 children; the
	// chat span says 100 and then 5 input tokens.
	td := batch(s[0], s[1])
	td = withRepeat(t, td, "invoke_agent coder", contract.AttrChildren, map[string]any{"intValue": "1"})
	td = withRepeat(t, td, "chat", contract.AttrUsageInputTokens, map[string]any{"intValue": "5"})

	h := newStoredHarness(t, mem, clk, sink, func(c *Config) { c.OpenTimeout = time.Hour; c.PendingDelay = 0 })
	h.consume(td)
	sums := h.of("inv-1")
	require.Len(t, sums, 1)
	assert.Equal(t, contract.StatusPending, strAttr(sums[0], contract.AttrStatus))
	h.shutdown()

	clk.Advance(time.Minute)
	h2 := newStoredHarness(t, mem, clk, sink, func(c *Config) { c.OpenTimeout = time.Hour; c.PendingDelay = 0 })
	h2.advance(2 * time.Hour)
	for _, sum := range h2.of("inv-1") {
		assert.NotEqual(t, contract.StatusFinal, strAttr(sum, contract.AttrStatus), "a wrong final after the restart")
	}
	last := h2.of("inv-1")
	require.NotEmpty(t, last)
	reasons := strsAttr(last[len(last)-1], contract.AttrIncompleteReasons)
	assert.Contains(t, reasons, "malformed_attribute:invocation.children on invoke_agent coder")
	assert.Contains(t, reasons, "malformed_attribute:gen_ai.usage.input_tokens on chat")
	h2.shutdown()
}

// Live, without a restart, the same input is never final either, and
// the reasons name the repeated keys at once (no open_timeout needed when
// the counts are otherwise met).
func TestRepeatedKeyMalformedLive(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.EmitPending = false })
	s := scenario("inv-1", 0)
	td := batch(s...)
	td = withRepeat(t, td, "continue_agent coder", contract.AttrRole, map[string]any{"stringValue": "root"})
	h.consume(td)
	sum := requireOne(t, h, "inv-1")
	assertStatus(t, sum, contract.StatusIncomplete, 1)
	assert.Contains(t, strsAttr(sum, contract.AttrIncompleteReasons), "malformed_attribute:invocation.role on continue_agent coder")

	// A repeat with the same value is harmless.
	h = newHarness(t, 1, func(c *Config) { c.EmitPending = false })
	td = withRepeat(t, batch(scenario("inv-2", 100)...), "chat", contract.AttrOperationName, map[string]any{"stringValue": "chat"})
	h.consume(td)
	assertStatus(t, requireOne(t, h, "inv-2"), contract.StatusFinal, 1)
}

// Issue 19, finding 3: a rule attribute of the wrong type is malformed,
// never absent: a job whose role is an array still may not close final
// while its followup never arrives.
func TestWrongTypeRoleNeverFinal(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.EmitPending = false; c.OpenTimeout = time.Hour })
	s := scenario("inv-1", 0)
	s[3].role = ""
	s[3].extra = map[string]any{contract.AttrRole: []any{contract.RoleBackground}}
	h.consume(batch(s[0], s[1], s[2], s[3])) // no continuation
	for _, sum := range h.of("inv-1") {
		assert.NotEqual(t, contract.StatusFinal, strAttr(sum, contract.AttrStatus))
	}
	sum := requireOne(t, h, "inv-1")
	assertStatus(t, sum, contract.StatusIncomplete, 1)
	assert.Contains(t, strsAttr(sum, contract.AttrIncompleteReasons), "malformed_attribute:invocation.role on background shell")
}

// A link whose invocation.link is repeated with different values, or not
// a string, discharges nothing and is malformed.
func TestMalformedLinkKind(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.EmitPending = false; c.OpenTimeout = time.Hour })
	s := scenario("inv-1", 0)
	td := batch(s...)
	forSpans(td, func(_ pcommon.Resource, sp ptrace.Span) {
		if sp.Name() == "continue_agent coder" {
			sp.Links().At(0).Attributes().PutInt(contract.AttrLink, 1)
		}
	})
	h.consume(td)
	assert.Empty(t, h.of("inv-1"), "the followup is still open")
	h.advance(time.Hour)
	sum := requireOne(t, h, "inv-1")
	assertStatus(t, sum, contract.StatusIncomplete, 1)
	assert.Contains(t, strsAttr(sum, contract.AttrIncompleteReasons), "malformed_attribute:invocation.link on continue_agent coder")
}

// v0.6 rule 3: a span that declares unrecorded children makes its
// invocation incomplete (not_sampled) once everything else is met.
func TestUnrecordedChildrenNotSampled(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.EmitPending = false })
	s := scenario("inv-1", 0)
	s[0].extra[contract.AttrUnrecorded] = int64(1)
	h.consume(batch(s...))
	sum := requireOne(t, h, "inv-1")
	assertStatus(t, sum, contract.StatusIncomplete, 1)
	assert.Equal(t, []string{"not_sampled:invoke_agent coder"}, strsAttr(sum, contract.AttrIncompleteReasons))
	assert.Equal(t, int64(150), intAttr(sum, contract.AttrUsageInputTokens))

	h = newHarness(t, 1, func(c *Config) { c.EmitPending = false })
	s = scenario("inv-2", 100)
	s[0].extra[contract.AttrUnrecorded] = int64(0)
	h.consume(batch(s...))
	assertStatus(t, requireOne(t, h, "inv-2"), contract.StatusFinal, 1)
}

// v0.6 rule 4: a span declaring detached spans waits for each to link
// back with detached_from, matched by trace and span ID, in any order.
func TestDetachedSpansCounted(t *testing.T) {
	detached := func(inv string, b uint64, linkTrace uint64) sp {
		return sp{inv: inv, name: "chat detached", trace: b + 7, id: b + 70, start: 4, end: 5, children: int64(0),
			op: contract.OpChat, usage: tokens(7, 1),
			extra: map[string]any{}, linkTrace: linkTrace}
	}
	addDetachedLink := func(td ptrace.Traces, name string, trace, span uint64) ptrace.Traces {
		forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
			if s.Name() == name {
				l := s.Links().AppendEmpty()
				l.SetTraceID(tid(trace))
				l.SetSpanID(sid(span))
				l.Attributes().PutStr(contract.AttrLink, contract.LinkDetachedFrom)
			}
		})
		return td
	}
	for _, tc := range []struct {
		name      string
		withSpan  bool
		linkTrace uint64
		status    string
		reason    string
	}{
		{"arrives", true, 1, contract.StatusFinal, ""},
		{"never arrives", false, 1, contract.StatusPending, ""},
		// The link names the root's span ID in another trace: it
		// discharges nothing (the invocation stays open, then times out
		// incomplete) and is malformed.
		{"links from another trace", true, 9, contract.StatusPending, "malformed_link:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, detachedFirst := range []bool{false, true} {
				h := newHarness(t, 1, func(c *Config) { c.OpenTimeout = time.Hour; c.PendingDelay = 0 })
				s := scenario("inv-1", 0)
				s[0].extra[contract.AttrDetached] = int64(1)
				main := batch(s...)
				var parts []ptrace.Traces
				if tc.withSpan {
					d := addDetachedLink(batch(detached("inv-1", 0, 0)), "chat detached", tc.linkTrace, 1)
					parts = append(parts, d)
				}
				if detachedFirst {
					parts = append(parts, main)
				} else {
					parts = append([]ptrace.Traces{main}, parts...)
				}
				for _, p := range parts {
					h.consume(p)
				}
				sums := h.of("inv-1")
				require.NotEmpty(t, sums)
				last := sums[len(sums)-1]
				assert.Equal(t, tc.status, strAttr(last, contract.AttrStatus), "detached first: %v", detachedFirst)
				if tc.status == contract.StatusPending {
					assert.Contains(t, strsAttr(last, contract.AttrIncompleteReasons), "missing_detached:invoke_agent coder")
				}
				if tc.status == contract.StatusFinal {
					assert.Equal(t, int64(157), intAttr(last, contract.AttrUsageInputTokens))
				}
				if tc.reason != "" {
					h.advance(time.Hour)
					sums = h.of("inv-1")
					last = sums[len(sums)-1]
					assertStatus(t, last, contract.StatusIncomplete, 1)
					assert.True(t, slices.ContainsFunc(strsAttr(last, contract.AttrIncompleteReasons), func(r string) bool {
						return strings.HasPrefix(r, tc.reason)
					}), "reasons %q lack %s", strsAttr(last, contract.AttrIncompleteReasons), tc.reason)
				}
			}
		})
	}
}

// v0.6 rule 2 for a detached_from link to a span that declares no
// invocation.detached (found by FuzzLedgerDifferential): naming a member's
// span ID in another trace is malformed_link, whichever arrives first,
// though no count waits for the link.
func TestDetachedLinkOtherTraceUndeclared(t *testing.T) {
	for _, linkFirst := range []bool{false, true} {
		h := newHarness(t, 1, nil)
		s := scenario("inv-1", 0)
		d := batch(sp{inv: "inv-1", name: "chat detached", trace: 7, id: 70, start: 4, end: 5, children: int64(0),
			op: contract.OpChat, usage: tokens(7, 1)})
		forSpans(d, func(_ pcommon.Resource, s ptrace.Span) {
			l := s.Links().AppendEmpty()
			l.SetTraceID(tid(9)) // the root is in trace 1
			l.SetSpanID(sid(1))
			l.Attributes().PutStr(contract.AttrLink, contract.LinkDetachedFrom)
		})
		if linkFirst {
			h.consume(d)
			h.consume(batch(s...))
		} else {
			h.consume(batch(s...))
			h.consume(d)
		}
		sums := h.of("inv-1")
		require.NotEmpty(t, sums)
		last := sums[len(sums)-1]
		assert.Equal(t, contract.StatusIncomplete, strAttr(last, contract.AttrStatus), "link first: %v", linkFirst)
		assert.Contains(t, strsAttr(last, contract.AttrIncompleteReasons), "malformed_link:chat detached", "link first: %v", linkFirst)
	}
}
