package instrument

import (
	"context"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// This file keeps the invocation and session ids whole when the SDK's
// AttributeValueLengthLimit is shorter than they are. The SDK cuts a string
// attribute when it is set, so a span's invocation.id (the Tracker's, or
// the SpanProcessor's stamp) and gen_ai.conversation.id may reach OnStart
// and OnEnd cut. The SpanProcessor reads the ids from sources no limit
// cuts: the baggage, its record of the parent span, and the Tracker's
// session (sessionKey). A span whose id was cut is keyed by the full id in
// the ledger and exported with the full ids restored and
// invocation.sdk_limit = attribute_value_length (ledger.Restored), so both
// halves key it one way and neither says final.

// lifecycleKey is the context key under which the Tracker hands the
// role and session it sets on a lifecycle span to OnStart (only the
// context the span starts from holds it).
type lifecycleKey struct{}

// lifecycle is what the Tracker set on a lifecycle span.
type lifecycle struct {
	role, session string
}

// isCut reports whether got is full cut short: a strict prefix, which is
// what the SDK's value length limit makes of a string.
func isCut(got, full string) bool {
	return len(got) < len(full) && strings.HasPrefix(full, got)
}

// restoreIDs finds, before the ledger sees the span, the ids the SDK cut
// on the span's own attributes: its invocation.id against the baggage,
// and the role and session of a Tracker's span against the Tracker's.
// Only a span that carries invocation.id or invocation.role (or a
// Tracker's span that lost attributes) is looked at.
func restoreIDs(parent context.Context, s sdktrace.ReadWriteSpan, st *spanStart) {
	if !st.attrs.Marked && (s.DroppedAttributes() == 0 || s.InstrumentationScope().Name != ScopeName) {
		// A Tracker's span that lost its attributes to the count limit
		// at its start is looked at too.
		return
	}
	if b := baggageInvocationID(parent); b != "" && b != st.attrs.ID && isCut(st.attrs.ID, b) {
		// A value limit of 0 leaves the id empty.
		st.id = b
		st.cut = &ledger.Restored{ID: b}
	}
	lc, _ := parent.Value(lifecycleKey{}).(*lifecycle)
	if lc == nil {
		return
	}
	if isCut(st.attrs.Role, lc.role) {
		st.attrs.Role = lc.role
		st.restored().Role = lc.role
	}
	if (lc.role == contract.RoleRoot || lc.role == contract.RoleContinuation) && isCut(st.attrs.Session, lc.session) {
		st.attrs.Session = lc.session
		st.restored().Session = lc.session
	}
}

// restored returns the span's ids to restore, made when none were.
func (st *spanStart) restored() *ledger.Restored {
	if st.cut == nil {
		st.cut = &ledger.Restored{}
	}
	return st.cut
}

// valueLimit is what a SpanProcessor learned of one provider's
// AttributeValueLengthLimit from the invocation ids it stamped.
type valueLimit struct {
	tp trace.TracerProvider
	// intact is the longest id (in runes) seen whole; cut the limit, once
	// an id was seen cut (0 before).
	intact, cut int
}

// maxProviders bounds the providers whose limits a SpanProcessor keeps
// (one, nearly always); beyond it every stamp is checked.
const maxProviders = 8

// checkStampLocked says whether the stamp of id on a span of provider tp
// must be read back (the provider's limit is not known to keep it whole),
// and reports true in cut when the provider's limit is known to cut it.
// p.mu must be held.
func (p *SpanProcessor) checkStampLocked(tp trace.TracerProvider, id string) (probe, cut bool) {
	n := utf8.RuneCountInString(id)
	for i := range p.limits {
		l := &p.limits[i]
		if l.tp != tp {
			continue
		}
		switch {
		case l.cut > 0 && n > l.cut:
			return false, true
		case n <= l.intact:
			return false, false
		}
		return true, false
	}
	if len(p.limits) < maxProviders {
		p.limits = append(p.limits, valueLimit{tp: tp})
	}
	return true, false
}

// learnStampLocked records what reading back a stamp of id showed: got is
// the invocation.id the span holds. p.mu must be held.
func (p *SpanProcessor) learnStampLocked(tp trace.TracerProvider, id, got string) {
	for i := range p.limits {
		l := &p.limits[i]
		if l.tp != tp {
			continue
		}
		if got == id {
			l.intact = max(l.intact, utf8.RuneCountInString(id))
		} else if got != "" && isCut(got, id) {
			l.cut = utf8.RuneCountInString(got)
		}
		return
	}
}

// checkStamp finds, after the stamp, whether the SDK cut the invocation.id
// the SpanProcessor stamped on s: from what it learned of the provider's
// limit, else by reading the span back (once per provider and id length).
// A cut id is added to st.cut.
func (p *SpanProcessor) checkStamp(s sdktrace.ReadWriteSpan, st *spanStart) {
	if st.id == "" || st.id == st.attrs.ID || (st.cut != nil && st.cut.ID != "") {
		return
	}
	tp := s.TracerProvider()
	p.mu.Lock()
	probe, cut := p.checkStampLocked(tp, st.id)
	p.mu.Unlock()
	if probe {
		got := idAttr(s.Attributes(), contract.AttrInvocationID)
		p.mu.Lock()
		p.learnStampLocked(tp, st.id, got)
		p.mu.Unlock()
		cut = got != st.id
	}
	if cut {
		st.restored().ID = st.id
	}
}

// idAttr returns the string value of key in attrs, or "".
func idAttr(attrs []attribute.KeyValue, key string) string {
	for _, kv := range attrs {
		if string(kv.Key) == key && kv.Value.Type() == attribute.STRING {
			return kv.Value.AsString()
		}
	}
	return ""
}

// markLocked keeps what OnEnd restores or marks on rec's span (nil for
// nothing). p.mu must be held.
func (p *SpanProcessor) markLocked(rec *spanRecord, r *ledger.Restored) {
	if r == nil {
		return
	}
	if p.marks == nil {
		p.marks = make(map[*spanRecord]*ledger.Restored)
	}
	p.marks[rec] = r
	rec.flags |= recordMarked
}
