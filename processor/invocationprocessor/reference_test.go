package invocationprocessor

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// refModel is a from-scratch reading of CONTRACT.md's finality rules, for
// checking the processor's incremental ledger: it keeps every delivered
// span and, asked about an invocation, recomputes whether conditions 1-3
// hold, nothing taints it, and what its totals are. It is quadratic and
// simple on purpose; it ignores bounds (tests using it configure them out
// of reach).
type refModel struct {
	maxSpans int
	usageOps map[string]struct{}
	spans    map[string]ptrace.SpanSlice // per invocation, in delivery order
	// lastRemote is when a span ID new to the invocation last arrived
	// that was, when it arrived, a remote span or under an arrived remote
	// ancestor: CONTRACT.md "Remote settle is per remote subtree".
	lastRemote map[string]int64
}

func newRefModel(cfg *Config) *refModel {
	m := &refModel{
		maxSpans:   cfg.MaxSpansPerInvocation,
		usageOps:   map[string]struct{}{},
		spans:      map[string]ptrace.SpanSlice{},
		lastRemote: map[string]int64{},
	}
	for _, op := range cfg.UsageOperations {
		m.usageOps[op] = struct{}{}
	}
	return m
}

// deliver records the member spans of a batch delivered at now. A batch
// arrives at one instant, so a new span under a remote ancestor of the
// same batch moves the settle no later than that ancestor's own arrival:
// the remote reading is taken after the whole batch is recorded.
func (m *refModel) deliver(td ptrace.Traces, now int64) {
	var fresh []ptrace.Span
	var freshInv []string
	forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
		v, ok := s.Attributes().Get(contract.AttrInvocationID)
		if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() == "" || s.Name() == contract.SpanNameSummary {
			return
		}
		id := v.Str()
		slice, ok := m.spans[id]
		if !ok {
			slice = ptrace.NewSpanSlice()
			m.spans[id] = slice
		}
		isNew := true
		for i := 0; i < slice.Len(); i++ {
			if slice.At(i).SpanID() == s.SpanID() {
				isNew = false
				break
			}
		}
		c := slice.AppendEmpty()
		s.CopyTo(c)
		if isNew {
			fresh, freshInv = append(fresh, c), append(freshInv, id)
		}
	})
	for i, s := range fresh {
		if m.underRemote(freshInv[i], s) {
			m.lastRemote[freshInv[i]] = now
		}
	}
}

// underRemote reports whether s is remote or has a remote ancestor among
// the invocation's arrived spans (first arrival of each span ID, same
// trace). A chain longer than 64 ancestors reads as remote, as the
// contract says.
func (m *refModel) underRemote(id string, s ptrace.Span) bool {
	all := m.spans[id]
	first := map[pcommon.SpanID]ptrace.Span{}
	for i := 0; i < all.Len(); i++ {
		if _, ok := first[all.At(i).SpanID()]; !ok {
			first[all.At(i).SpanID()] = all.At(i)
		}
	}
	cur := s
	for range 65 {
		if flagSet(cur.Attributes(), contract.AttrRemote) {
			return true
		}
		p, ok := first[cur.ParentSpanID()]
		if !ok || cur.ParentSpanID().IsEmpty() || p.TraceID() != cur.TraceID() {
			return false
		}
		cur = p
	}
	return true
}

// refVerdict is what the reference model says of an invocation.
type refVerdict struct {
	provable   bool   // conditions 1-3 hold and nothing taints the invocation
	why        string // why not, for messages
	remote     bool   // a member is remote: final needs remote_settle of quiet
	lastRemote int64  // the latest arrival under a remote span (lastRemote)
	usage      ledgerrule.Usage
	afterIn    int64
	afterOut   int64
	modelCalls int64
	members    int64
}

func (m *refModel) verdict(id string) refVerdict {
	all := m.spans[id]
	v := refVerdict{provable: true, lastRemote: m.lastRemote[id]}
	fail := func(why string) {
		if v.provable {
			v.provable, v.why = false, why
		}
	}
	// Members: the first arrival of each span ID. A later span with the
	// same ID in another trace is a reused ID (rule 3).
	members := map[pcommon.SpanID]ptrace.Span{}
	var order []ptrace.Span
	for i := 0; i < all.Len(); i++ {
		s := all.At(i)
		if first, ok := members[s.SpanID()]; ok {
			if first.TraceID() != s.TraceID() {
				fail("span_id_reused")
			}
			continue
		}
		members[s.SpanID()] = s
		order = append(order, s)
	}
	v.members = int64(len(order))

	var root ptrace.Span
	rootFound := false
	for _, s := range order {
		attrs := s.Attributes()
		if refRole(s) == contract.RoleRoot && !rootFound {
			root, rootFound = s, true
		}
		if _, ok := attrs.Get(contract.AttrUnattributed); ok {
			fail("unattributed")
		}
		if flagSet(attrs, contract.AttrRemote) {
			v.remote = true
		}
		if s.ParentSpanID() == s.SpanID() {
			fail("self parent")
		}
		if p, ok := members[s.ParentSpanID()]; ok && p.TraceID() != s.TraceID() {
			fail("parent in another trace")
		}
		if _, malformed := refLinks(s); malformed {
			fail("malformed links")
		}
	}
	if !rootFound {
		fail("root missing")
	}
	// Cycles of the parent relation among members.
	for _, s := range order {
		cur, seen := s, 0
		for seen <= len(order) {
			p, ok := members[cur.ParentSpanID()]
			if !ok || cur.ParentSpanID().IsEmpty() {
				break
			}
			if p.SpanID() == s.SpanID() {
				fail("parent cycle")
				break
			}
			cur, seen = p, seen+1
		}
	}
	// Counts (conditions 2 and 3).
	for _, p := range order {
		attrs := p.Attributes()
		if c, ok := attrs.Get(contract.AttrChildren); ok {
			n, valid := validCount(c, m.maxSpans)
			if !valid {
				fail("invalid children count")
			}
			got := int32(0)
			for _, c := range order {
				if c.ParentSpanID() == p.SpanID() && c.SpanID() != p.SpanID() && c.TraceID() == p.TraceID() &&
					!flagSet(c.Attributes(), contract.AttrLateChild) {
					got++
				}
			}
			if got < n {
				fail("missing children")
			}
		}
		if refRole(p) == contract.RoleBackground {
			f, ok := attrs.Get(contract.AttrFollowups)
			k, valid := int32(0), false
			if ok {
				k, valid = validCount(f, m.maxSpans)
			}
			if !valid {
				fail("invalid followups count")
			}
			got := int32(0)
			for _, l := range order {
				if follow, malformed := refLinks(l); !malformed && follow[p.SpanID()] {
					got++
				}
			}
			if got < k {
				fail("open followup")
			}
		}
	}
	// Totals.
	for _, s := range order {
		attrs := s.Attributes()
		op, ok := attrs.Get(contract.AttrOperationName)
		if !ok || op.Type() != pcommon.ValueTypeStr {
			continue
		}
		if _, isModel := m.usageOps[op.Str()]; !isModel {
			continue
		}
		v.modelCalls++
		_, hasIn := attrs.Get(contract.AttrUsageInputTokens)
		_, hasOut := attrs.Get(contract.AttrUsageOutputTokens)
		if !hasIn && !hasOut && s.Status().Code() != ptrace.StatusCodeError {
			fail("usage missing")
		}
		in := refUsage(attrs, contract.AttrUsageInputTokens)
		out := refUsage(attrs, contract.AttrUsageOutputTokens)
		v.usage.Input += in
		v.usage.Output += out
		v.usage.CacheRead += refUsage(attrs, contract.AttrUsageCacheReadTokens)
		v.usage.CacheCreation += refUsage(attrs, contract.AttrUsageCacheCreateTokens)
		v.usage.Reasoning += refUsage(attrs, contract.AttrUsageReasoningTokens)
		if rootFound && s.StartTimestamp() > root.EndTimestamp() {
			v.afterIn += in
			v.afterOut += out
		}
	}
	return v
}

func refRole(s ptrace.Span) string {
	v, ok := s.Attributes().Get(contract.AttrRole)
	if !ok || v.Type() != pcommon.ValueTypeStr {
		return ""
	}
	return v.Str()
}

// refLinks returns the span's followup link targets, and whether its
// links are malformed (a followup link to itself, or a target both
// followed up and consumed): then they discharge nothing.
func refLinks(s ptrace.Span) (follow map[pcommon.SpanID]bool, malformed bool) {
	follow = map[pcommon.SpanID]bool{}
	consumed := map[pcommon.SpanID]bool{}
	for i := 0; i < s.Links().Len(); i++ {
		l := s.Links().At(i)
		v, ok := l.Attributes().Get(contract.AttrLink)
		if !ok || v.Type() != pcommon.ValueTypeStr {
			continue
		}
		switch v.Str() {
		case contract.LinkFollowup:
			follow[l.SpanID()] = true
		case contract.LinkConsumed:
			consumed[l.SpanID()] = true
		}
	}
	malformed = follow[s.SpanID()]
	for t := range consumed {
		malformed = malformed || follow[t]
	}
	return follow, malformed
}

// refUsage reads a usage value the way the contract sums it: a
// non-negative integer, else nothing (the fuzz values never overflow).
func refUsage(attrs pcommon.Map, key string) int64 {
	v, ok := attrs.Get(key)
	if !ok || v.Type() != pcommon.ValueTypeInt || v.Int() < 0 {
		return 0
	}
	return v.Int()
}

// validCount reads an obligation count as the reference model does; ok is
// false when it cannot be trusted.
func validCount(v pcommon.Value, maxSpans int) (int32, bool) {
	if v.Type() != pcommon.ValueTypeInt {
		return 0, false
	}
	n := v.Int()
	if n < 0 || n > int64(maxSpans) || n > math.MaxInt32 {
		return 0, false
	}
	return int32(n), true
}

// flagSet reads a boolean marker the conservative way: present and not
// false means set.
func flagSet(attrs pcommon.Map, key string) bool {
	v, ok := attrs.Get(key)
	return ok && (v.Type() != pcommon.ValueTypeBool || v.Bool())
}
