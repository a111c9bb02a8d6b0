package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"unsafe"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// timeline is what an invocation records of its spans for the status
// extension's timeline page: the first status_spans spans it indexed, in
// arrival order, plus its root if that came later, and how many it
// indexed beyond them. Nothing reads it for a summary: the page is a
// view, and the summary counts every span.
//
// The records are appended and never changed: a published view shares
// the slice up to its length (a full slice expression), so publishing
// copies nothing, and a later append writes only past what any reader
// holds. The records live as long as the invocation (a revision after the
// close draws its late spans too) and are counted in its byte estimate.
type timeline struct {
	spans   []statusapi.Span
	omitted int64
}

// sizeTimelineSpan is one record, for the byte estimate; its name is the
// Graph's interned string, counted there.
const sizeTimelineSpan = int64(unsafe.Sizeof(statusapi.Span{}))

// firstTimelineSpans is the room a first record allocates.
const firstTimelineSpans = 8

// noteSpan records an indexed span, when the processor publishes to a
// status extension (limit > 0), and reports false when it was past the
// limit (counted in bound_hits, bound status_spans). r is what the Graph
// made of it.
func (inv *invocation) noteSpan(f *spanFacts, r *ledgerrule.Result, limit int) bool {
	if limit <= 0 {
		return true
	}
	t := &inv.rareOf().timeline
	if len(t.spans) >= limit && !r.Root {
		t.omitted++
		return false
	}
	if len(t.spans) == cap(t.spans) {
		// Grow by doubling up to the limit (one more for a late root),
		// never past it.
		n := min(max(firstTimelineSpans, 2*cap(t.spans)), limit)
		if n <= len(t.spans) {
			n = len(t.spans) + 1
		}
		grown := make([]statusapi.Span, len(t.spans), n)
		copy(grown, t.spans)
		t.spans = grown
	}
	sp := statusapi.Span{
		TraceID:      statusapi.TraceID(f.Trace),
		SpanID:       statusapi.SpanID(f.ID),
		ParentSpanID: statusapi.SpanID(f.Parent),
		Name:         inv.Name(r.NameIndex),
		Role:         roleOf(f.Role),
		Start:        spanTime(f.Start),
		End:          spanTime(f.End),
		ModelCall:    f.ModelCall,
		Failed:       f.Failed,
		Remote:       f.Remote,
	}
	if f.ModelCall {
		sp.InputTokens, sp.OutputTokens = r.Call.Input, r.Call.Output
	}
	if links := f.Links.All(); len(links) > 0 {
		sp.Link, sp.LinkedSpanID, sp.Links = linkKindOf(links[0].Kind), statusapi.SpanID(links[0].Span), len(links)
	}
	t.spans = append(t.spans, sp)
	return true
}

// timelineView is the recorded spans as a published view shares them; nil
// when nothing is recorded (no status extension, or status_spans 0).
func (inv *invocation) timelineView(limit int) *statusapi.Timeline {
	if limit <= 0 {
		return nil
	}
	var t timeline
	if inv.rare != nil {
		t = inv.rare.timeline
	}
	n := len(t.spans)
	return &statusapi.Timeline{Spans: t.spans[:n:n], Limit: limit, Omitted: t.omitted}
}

// timelineNotStored marks an invocation restored from its closed record,
// which does not store the timeline's records: its page draws the summary
// and counts every indexed span as not drawn.
func (inv *invocation) timelineNotStored() {
	if inv.Indexed > 0 {
		inv.rareOf().timeline.omitted = inv.Indexed
	}
}

// timelineBytes is the records' share of the byte estimate: the slice at
// its capacity.
func (inv *invocation) timelineBytes() int64 {
	if inv.rare == nil {
		return 0
	}
	return int64(cap(inv.rare.timeline.spans)) * sizeTimelineSpan
}

func roleOf(r ledgerrule.Role) statusapi.Role {
	switch r {
	case ledgerrule.RoleRoot:
		return statusapi.RoleRoot
	case ledgerrule.RoleBackground:
		return statusapi.RoleBackground
	case ledgerrule.RoleContinuation:
		return statusapi.RoleContinuation
	case ledgerrule.RoleFollowupClosed:
		return statusapi.RoleFollowupClosed
	}
	return ""
}

func linkKindOf(k ledgerrule.LinkKind) statusapi.LinkKind {
	switch k {
	case ledgerrule.LinkFollowup:
		return statusapi.LinkFollowup
	case ledgerrule.LinkConsumed:
		return statusapi.LinkConsumed
	case ledgerrule.LinkDetachedFrom:
		return statusapi.LinkDetachedFrom
	}
	return ""
}
