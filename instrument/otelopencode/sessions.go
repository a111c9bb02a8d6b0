package otelopencode

import "sort"

// sessionTable holds the sessions the mapper knows, by id. Beyond max it
// forgets the least recently used sessions that owe nothing, counting
// each in the telemetry. It is guarded by the mapper's lock.
type sessionTable struct {
	max   int
	byID  map[string]*sessionState
	stats *telemetry
	// seq orders sessions by last use (sessionState.lastUse), for
	// eviction.
	seq uint64
}

func newSessionTable(max int, stats *telemetry) *sessionTable {
	return &sessionTable{max: max, byID: make(map[string]*sessionState), stats: stats}
}

// use returns session id, made when it is new, as the most recently used
// one. Making a session may evict others beyond max, never the new one.
func (t *sessionTable) use(id string) *sessionState {
	t.seq++
	s, ok := t.byID[id]
	if ok {
		s.lastUse = t.seq
		return s
	}
	s = newSessionState(id)
	s.lastUse = t.seq
	t.byID[id] = s
	t.evict()
	return s
}

// lookup returns session id, or nil: it makes nothing and leaves the
// order of use alone.
func (t *sessionTable) lookup(id string) *sessionState { return t.byID[id] }

// remove forgets session id.
func (t *sessionTable) remove(id string) { delete(t.byID, id) }

// evict forgets the least recently used sessions that owe nothing, beyond
// max.
func (t *sessionTable) evict() {
	if len(t.byID) <= t.max {
		return
	}
	var idle []*sessionState
	for _, s := range t.byID {
		if !s.busy() {
			idle = append(idle, s)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUse < idle[j].lastUse })
	for _, s := range idle {
		if len(t.byID) <= t.max {
			return
		}
		delete(t.byID, s.id)
		t.stats.sessionEvicted()
	}
}
