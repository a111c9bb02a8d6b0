package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// encodeSummary stores a summary as its fields (journal.Encoder.Summary):
// a restart rebuilds its span with summary.Build, as the flush would have
// built it live, so a summary re-sent after a restart is the same span.
// A summary restored in the older form (a stored span, Restored) is
// stored as that span again.
func encodeSummary(sum *summary.Summary) []byte {
	if sum.Restored != nil {
		return encodeSummarySpan(*sum.Restored)
	}
	e := journal.Encoder{B: make([]byte, 0, 256)}
	e.Summary(sum)
	if e.Err != nil {
		// A resource nested deeper than the journal stores, which the
		// processor refuses before it makes a summary of it: stored as
		// unreadable, so a restart makes it again from the state.
		return nil
	}
	return e.B
}

// encodeSummarySpan writes a summary span in the older form: its
// resource's attributes, then the span (journal.Encoder.Span).
func encodeSummarySpan(rs ptrace.ResourceSpans) []byte {
	e := journal.Encoder{}
	e.Attrs(rs.Resource().Attributes(), nil, 0)
	e.Span(rs.ScopeSpans().At(0).Spans().At(0), nil, nil)
	return e.B
}

// decodeSummary reads a stored summary back for the outbox, in either
// form.
func decodeSummary(ev *journal.Event) (summary.Summary, error) {
	if !journal.IsSummaryFields(ev.Summary) {
		return decodeSummarySpan(ev)
	}
	sum := summary.Summary{ID: ev.ID, Status: ev.Status, Revision: ev.Revision}
	d := journal.Decoder{B: ev.Summary}
	d.Summary(&sum)
	if d.Err != nil {
		return summary.Summary{}, fmt.Errorf("summary of %s revision %d: %w", ev.ID, ev.Revision, d.Err)
	}
	return sum, nil
}

// decodeSummarySpan reads a summary stored in the older form (as the span
// it was sent as), which is re-sent as it was stored.
func decodeSummarySpan(ev *journal.Event) (summary.Summary, error) {
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
