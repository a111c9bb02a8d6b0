package ledger

// sessionIndex lists the remembered invocations of each session, linked
// through their sessionPrev and sessionNext fields, so that adding and
// forgetting an invocation allocates nothing. The Ledger's mutex guards
// it.
type sessionIndex struct {
	// first holds the most recently added invocation of each session.
	first map[string]*Invocation
}

func newSessionIndex() sessionIndex {
	return sessionIndex{first: make(map[string]*Invocation)}
}

// add lists inv under its session, which must be set.
func (x *sessionIndex) add(inv *Invocation) {
	next := x.first[inv.session]
	inv.sessionPrev, inv.sessionNext = nil, next
	if next != nil {
		next.sessionPrev = inv
	}
	x.first[inv.session] = inv
	inv.inSession = true
}

// remove unlists inv, if listed.
func (x *sessionIndex) remove(inv *Invocation) {
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
