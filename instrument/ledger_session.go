package instrument

import "sort"

// sessionIndex lists the remembered invocations of each session, linked
// through their sessionPrev and sessionNext fields, so that adding and
// forgetting an invocation allocates nothing. The Ledger's mutex guards
// it.
type sessionIndex struct {
	// first holds the most recently added invocation of each session.
	first map[string]*invocationState
}

func newSessionIndex() sessionIndex {
	return sessionIndex{first: make(map[string]*invocationState)}
}

// add lists inv under its session, which must be set.
func (x *sessionIndex) add(inv *invocationState) {
	next := x.first[inv.session]
	inv.sessionPrev, inv.sessionNext = nil, next
	if next != nil {
		next.sessionPrev = inv
	}
	x.first[inv.session] = inv
	inv.inSession = true
}

// remove unlists inv, if listed.
func (x *sessionIndex) remove(inv *invocationState) {
	if !inv.inSession {
		return
	}
	if inv.sessionNext != nil {
		inv.sessionNext.sessionPrev = inv.sessionPrev
	}
	switch {
	case inv.sessionPrev != nil:
		inv.sessionPrev.sessionNext = inv.sessionNext
	case inv.sessionNext != nil:
		x.first[inv.session] = inv.sessionNext
	default:
		delete(x.first, inv.session)
	}
	inv.sessionPrev, inv.sessionNext, inv.inSession = nil, nil, false
}

// Session returns what session still owes its invocations.
func (l *Ledger) Session(session string) SessionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock.Now())
	var st SessionState
	for inv := l.sessions.first[session]; inv != nil; inv = inv.sessionNext {
		for _, j := range inv.openJobs {
			st.OpenJobs = append(st.OpenJobs, j)
		}
		for i := range inv.nodes.list {
			if n := &inv.nodes.list[i]; n.arrived && n.declaredFollowups > n.arrivedFollowups {
				st.ExpectedFollowups = append(st.ExpectedFollowups,
					JobInfo{InvocationID: inv.id, SpanID: n.sid, Name: inv.nameOf(n.name)})
			}
		}
		st.RunningContinuations += len(inv.runningConts)
		if inv.unattributedRunning {
			st.UnattributedTurns++
		}
	}
	byID := func(js []JobInfo) {
		sort.Slice(js, func(i, j int) bool {
			if js[i].InvocationID != js[j].InvocationID {
				return js[i].InvocationID < js[j].InvocationID
			}
			return js[i].SpanID.String() < js[j].SpanID.String()
		})
	}
	byID(st.OpenJobs)
	byID(st.ExpectedFollowups)
	st.OwesWork = len(st.OpenJobs) > 0 || len(st.ExpectedFollowups) > 0 || st.RunningContinuations > 0 ||
		st.UnattributedTurns > 0
	return st
}
