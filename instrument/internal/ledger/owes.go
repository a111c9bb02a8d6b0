package ledger

import (
	"context"
	"slices"
	"time"

	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// What an invocation owes in process is what the collector says it owes
// (ledgerrule.Graph.Owes, CONTRACT.md v0.12 "Owed means everything
// owed"), less what its open_timeout wrote off, plus what only the
// process sees: the jobs, continuations, unattributed turns and undeclared
// spans that started and have not ended. Eviction, the open timeout and
// the retention never make a session owe less while a job of it runs:
// the retention keeps a closed invocation that still holds work (bounded
// by WithMaxOpenInvocations), and when that bound forgets one the ledger
// counts it (owing_forgotten) and its session keeps owing, with that
// reason, until the forgotten invocation's work ends.

// ReasonOwingForgotten names, in a session's owed work, an invocation the
// ledger forgot while it still held work ("owing_forgotten:<invocation
// id>"): the bound of kept invocations was reached.
const ReasonOwingForgotten = "owing_forgotten"

// maxForgottenOwing bounds the forgotten owing invocations remembered per
// ledger.
const maxForgottenOwing = 4096

// owedKey names one owed item for the write-off.
type owedKey struct {
	kind string
	span ledgerrule.SpanID
}

// writeOff records what inv owes as its open timeout closes it: those
// items are no longer owed (the one write-off); work arriving later is.
// Few invocations time out, so the record is the Ledger's, by id. l.mu
// must be held.
func (l *Ledger) writeOff(inv *Invocation, now time.Time) {
	var keys []owedKey
	for _, o := range inv.g.Owes(now.UnixNano(), &l.graph) {
		keys = append(keys, owedKey{kind: o.Kind, span: o.SpanID})
	}
	if len(keys) == 0 {
		return
	}
	if l.writtenOff == nil {
		l.writtenOff = make(map[*Invocation][]owedKey)
	}
	l.writtenOff[inv] = keys
	inv.writtenOff = true
}

// owed lists what inv's Graph owes at now, less what was written off.
// l.mu must be held.
func (l *Ledger) owed(inv *Invocation, now time.Time) []ledgerrule.Owed {
	items := inv.g.Owes(now.UnixNano(), &l.graph)
	if !inv.writtenOff {
		return items
	}
	off := l.writtenOff[inv]
	return slices.DeleteFunc(items, func(o ledgerrule.Owed) bool {
		return slices.Contains(off, owedKey{kind: o.Kind, span: o.SpanID})
	})
}

// holdsWork reports whether inv still holds work of its session at now:
// something started and not ended, or something owed. l.mu must be held.
func (l *Ledger) holdsWork(inv *Invocation, now time.Time) bool {
	if len(inv.openJobs) > 0 || inv.running() {
		return true
	}
	return inv.g.OwesWork(now.UnixNano(), &l.graph) && len(l.owed(inv, now)) > 0
}

// forgottenOwing remembers the invocations the ledger forgot while they
// held work, by session, and their background spans, so the session keeps
// owing until those jobs' spans end. The Ledger's mutex guards it.
type forgottenOwing struct {
	bySession map[string][]string // invocation ids
	session   map[string]string   // invocation id -> session
	order     []string            // invocation ids, oldest first
}

// add remembers id of session; the oldest is dropped beyond
// maxForgottenOwing.
func (f *forgottenOwing) add(id, session string) {
	if session == "" {
		return
	}
	if f.session == nil {
		f.bySession = make(map[string][]string)
		f.session = make(map[string]string)
	}
	if _, ok := f.session[id]; ok {
		return
	}
	if len(f.order) >= maxForgottenOwing {
		f.remove(f.order[0])
	}
	f.session[id] = session
	f.bySession[session] = append(f.bySession[session], id)
	f.order = append(f.order, id)
}

// remove forgets id: its work came back (a span of it arrived) and the
// invocation is held again.
func (f *forgottenOwing) remove(id string) {
	session, ok := f.session[id]
	if !ok {
		return
	}
	delete(f.session, id)
	ids := slices.DeleteFunc(f.bySession[session], func(x string) bool { return x == id })
	if len(ids) == 0 {
		delete(f.bySession, session)
	} else {
		f.bySession[session] = ids
	}
	f.order = slices.DeleteFunc(f.order, func(x string) bool { return x == id })
}

// keepOrForget decides, for a closed invocation whose retention passed at
// now, whether the retention keeps it another period because it still
// holds work. A kept invocation counts toward the bound until forgotten.
// l.mu must be held.
func (l *Ledger) keepOrForget(inv *Invocation, now time.Time) (keep bool) {
	if !l.holdsWork(inv, now) {
		return false
	}
	if inv.keptOwing || l.keptOwing < l.held.maxOpen {
		if !inv.keptOwing {
			inv.keptOwing = true
			l.keptOwing++
		}
		return true
	}
	// The bound forgets it: counted, and its session keeps owing.
	l.owingForgotten.Add(context.Background(), 1)
	l.forgotten.add(inv.id, inv.session)
	return false
}

// released updates the kept count when inv is forgotten. l.mu must be
// held.
func (l *Ledger) released(inv *Invocation) {
	if inv.keptOwing {
		inv.keptOwing = false
		l.keptOwing--
	}
	if inv.writtenOff {
		inv.writtenOff = false
		delete(l.writtenOff, inv)
	}
}

// recreated gives an invocation the ledger creates again for a forgotten
// id its session, from the record of its summary or of forgotten owing
// invocations: a job ending after its invocation was forgotten stays its
// session's. l.mu must be held.
func (l *Ledger) recreated(inv *Invocation) {
	session, agent := l.forgotten.session[inv.id], ""
	if s, ok := l.record.get(inv.id); ok {
		session, agent = s.SessionID, s.Agent
	}
	l.forgotten.remove(inv.id)
	l.setSession(inv, session, agent)
}
