package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// encodeSummary stores a summary as the span the next consumer receives
// (resource attributes, then the span with every attribute), so a summary
// re-sent after a restart is the same span, whatever fields it has.
func encodeSummary(sum *summary.Summary, t *trust) []byte {
	if sum.Restored != nil {
		return encodeResourceSpan(*sum.Restored)
	}
	td := summary.Build([]summary.Summary{*sum}, t.mark)
	return encodeResourceSpan(td.ResourceSpans().At(0))
}

func encodeResourceSpan(rs ptrace.ResourceSpans) []byte {
	e := journal.Encoder{}
	e.Attrs(rs.Resource().Attributes(), nil, 0)
	e.Span(rs.ScopeSpans().At(0).Spans().At(0), nil, nil)
	return e.B
}

// decodeSummary rebuilds a stored summary for the outbox.
func decodeSummary(ev *journal.Event) (summary.Summary, error) {
	rs := ptrace.NewResourceSpans()
	d := journal.Decoder{B: ev.Summary}
	d.Attrs(rs.Resource().Attributes(), 0)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(metadata.ScopeName)
	d.Span(ss.Spans().AppendEmpty())
	if d.Err == nil && d.Remaining() != 0 {
		d.Fail("%d trailing bytes", d.Remaining())
	}
	if d.Err != nil {
		return summary.Summary{}, fmt.Errorf("summary of %s revision %d: %w", ev.ID, ev.Revision, d.Err)
	}
	return summary.Summary{ID: ev.ID, Status: ev.Status, Revision: ev.Revision, Restored: &rs}, nil
}
