package ledger

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// This file is how spans reach the Ledger: at their start (Started, from
// the SpanProcessor's OnStart) and at their end (Read, then Apply, from
// OnEnd; or Arrived for a span read whole).

// StartFacts is what the SpanProcessor knows of a span at its start
// besides its attributes.
type StartFacts struct {
	// Counted: the span's parent counts it in its invocation.children.
	Counted bool
	// Late: the span started after its parent ended.
	Late bool
}

// Started records a sampled span of invocation id at its start: the
// session of roots and continuations, and every span that no count
// declares (jobs, continuations, unattributed turns, late children, spans
// of a new trace), which the invocation then waits for (contract rule 6).
// A counted span without a role costs nothing here. It returns the
// invocation's state, for the SpanProcessor to hand back with the span's
// children (nil when it did not look it up).
func (l *Ledger) Started(id string, s sdktrace.ReadWriteSpan, attrs *StartAttrs, sf StartFacts) *Invocation {
	role := attrs.Role
	if role == "" && sf.Counted {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return nil
	}
	now := l.clock.Now()
	l.sweep(now)
	inv := l.lookup(id, now)
	l.setSession(inv, attrs.Session, attrs.Agent)
	sid := s.SpanContext().SpanID()
	switch role {
	case contract.RoleBackground:
		if inv.openJobs == nil {
			inv.openJobs = make(map[trace.SpanID]JobInfo)
		}
		inv.openJobs[sid] = JobInfo{InvocationID: id, SpanID: sid, Name: s.Name(), Started: s.StartTime()}
		l.background.add(sid, id)
		if sf.Late || attrs.LateChild {
			// No count declares the job (rule 6): it was started when no
			// span of its invocation was open.
			inv.anomaly(contract.AnomalyOrphanJob, s.Name())
		}
	case contract.RoleContinuation:
		if inv.runningConts == nil {
			inv.runningConts = make(map[trace.SpanID]struct{})
		}
		inv.runningConts[sid] = struct{}{}
	case contract.RoleRoot:
		if attrs.Unattributed != "" && !inv.g.RootArrived {
			inv.unattributedRunning = true
			inv.fail(contract.ReasonUnattributedWakeup, attrs.Unattributed)
		}
	}
	if !sf.Counted && role != contract.RoleRoot && role != contract.RoleContinuation {
		if inv.unended == nil {
			inv.unended = make(map[trace.SpanID]string)
		}
		inv.unended[sid] = s.Name()
	}
	return inv
}

// setSession records the session and agent of inv from a root or
// continuation, the first time they are known. l.mu must be held.
func (l *Ledger) setSession(inv *Invocation, session, agent string) {
	if agent != "" && inv.agent == "" {
		inv.agent = agent
	}
	if session == "" || inv.session != "" {
		return
	}
	inv.session = session
	l.sessions.add(inv)
}

// Arrived applies one ended, sampled span s of the SDK (without the
// SpanProcessor's wrapper); children is the invocation.children the
// SpanProcessor counted, CountAbsent when it counted none. It is read as
// exported (ExportCounts).
func (l *Ledger) Arrived(s sdktrace.ReadOnlySpan, children int) {
	var f Facts
	readFacts(&f, s, CountsOf(s, children, 0, 0), l.rule)
	l.Apply(s, &f, nil)
}

// Apply applies one ended, sampled span s whose facts f were read with
// readFacts (outside the ledger's lock) from the span as exported. known,
// when not nil, is the state the ledger had for the span's invocation at
// the span's start (or its parent's): it saves the lookup by id while the
// ledger still holds it.
func (l *Ledger) Apply(s sdktrace.ReadOnlySpan, f *Facts, known *Invocation) {
	if f.id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	now := l.clock.Now()
	l.sweep(now)
	inv := known
	if inv == nil || inv.forgotten || inv.id != f.id {
		inv = l.lookup(f.id, now)
	}
	closed := inv.status != contract.StatusPending
	if f.Role == ledgerrule.RoleBackground {
		l.background.add(s.SpanContext().SpanID(), f.id)
	}
	if l.background.foreignFollowup(f, f.id) {
		inv.anomaly(contract.AnomalyForeignFollowup, f.Name)
	}
	// Span names repeat ("chat gpt-4o"): the invocation keeps the ledger's
	// copy.
	f.Name = l.names.intern(f.Name)
	switch inv.arrive(s, f, now, &l.graph) {
	case ledgerrule.Duplicate:
		return
	case ledgerrule.SpanLimit:
		// Its totals can no longer be proven: it closes at once, as in
		// the collector.
		l.spanLimited.Add(context.Background(), 1)
		if !closed {
			l.closeForced(inv, reasonSpanLimit, now)
		}
		return
	case ledgerrule.Reused:
		if !closed {
			l.evaluate(inv, now)
		} else {
			l.revise(inv, now)
		}
		return
	}
	switch f.Role {
	case ledgerrule.RoleRoot, ledgerrule.RoleContinuation:
		l.setSession(inv, f.session, f.agent)
	}
	if closed {
		l.revise(inv, now)
		return
	}
	l.evaluate(inv, now)
}

// UnrecordedSpan records that a span of invocation id named name was not
// recorded though it started inside a recording span of the invocation
// (a model call a client wrapper saw dropped, NoteUnrecorded; or one
// recorded without being sampled): the invocation is never final
// (contract v0.6 rule 3, not_sampled:<name>). An invocation that closed
// already is revised, incomplete.
func (l *Ledger) UnrecordedSpan(id, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	now := l.clock.Now()
	l.sweep(now)
	inv := l.lookup(id, now)
	inv.fail(contract.ReasonNotSampled, name)
	if inv.status != contract.StatusPending {
		l.revise(inv, now)
	}
}

// Holds reports whether the ledger holds state for invocation id.
func (l *Ledger) Holds(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.held.get(id)
	return ok
}
