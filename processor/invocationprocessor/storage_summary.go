package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// encodeSummary stores a summary as the span the next consumer receives
// (resource attributes, then the span with every attribute), so a summary
// re-sent after a restart is the same span, whatever fields it has.
func encodeSummary(sum *summary, t *trust) []byte {
	if sum.restored != nil {
		return encodeResourceSpan(*sum.restored)
	}
	td := buildTraces([]summary{*sum}, t)
	return encodeResourceSpan(td.ResourceSpans().At(0))
}

func encodeResourceSpan(rs ptrace.ResourceSpans) []byte {
	e := encoder{}
	e.attrs(rs.Resource().Attributes(), nil, 0)
	e.span(rs.ScopeSpans().At(0).Spans().At(0), nil, nil)
	return e.b
}

// decodeSummary rebuilds a stored summary for the outbox.
func decodeSummary(ev *storedEvent) (summary, error) {
	rs := ptrace.NewResourceSpans()
	d := decoder{b: ev.summary}
	d.attrs(rs.Resource().Attributes(), 0)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(metadata.ScopeName)
	d.span(ss.Spans().AppendEmpty())
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	if d.err != nil {
		return summary{}, fmt.Errorf("summary of %s revision %d: %w", ev.id, ev.revision, d.err)
	}
	return summary{id: ev.id, status: ev.status, revision: ev.revision, restored: &rs}, nil
}
