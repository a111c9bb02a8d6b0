package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// store holds the latest view of every open invocation the processor
// published and of the most recently closed ones. Views are immutable once
// published: the store hands out the same pointers to readers.
type store struct {
	maxClosed int

	// mu guards every field below: the open and closed views by ID, the
	// closing order, and the session index.
	mu     sync.RWMutex
	open   map[string]*statusapi.Invocation
	closed map[string]*closedEntry
	// closings lists closed views in the order they were stored, oldest
	// first, from head; an entry whose seq no longer matches closed[id] is
	// stale (revised, reopened) and skipped.
	closings []closing
	head     int
	seq      uint64
	// sessions maps a session to the IDs of its open and closed views.
	sessions map[string]map[string]struct{}
}

type closedEntry struct {
	view *statusapi.Invocation
	seq  uint64
}

type closing struct {
	id  string
	seq uint64
}

func newStore(maxClosed int) *store {
	return &store{
		maxClosed: maxClosed,
		open:      make(map[string]*statusapi.Invocation),
		closed:    make(map[string]*closedEntry),
		sessions:  make(map[string]map[string]struct{}),
	}
}

// publish records each view in order, replacing the earlier view of its ID.
func (s *store) publish(views []statusapi.Invocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range views {
		v := views[i] // a copy: the caller keeps its slice
		s.remove(v.ID)
		s.index(v.Session, v.ID)
		if v.Open() {
			s.open[v.ID] = &v
			continue
		}
		s.seq++
		s.closed[v.ID] = &closedEntry{view: &v, seq: s.seq}
		s.closings = append(s.closings, closing{id: v.ID, seq: s.seq})
	}
	for len(s.closed) > s.maxClosed {
		c := s.closings[s.head]
		s.head++
		if e, ok := s.closed[c.id]; ok && e.seq == c.seq {
			s.remove(c.id)
		}
	}
	// Drop the consumed prefix and stale entries once they outnumber the
	// live ones, so closings stays within twice the closed views.
	if s.head > 0 && len(s.closings) > 2*len(s.closed)+64 {
		live := s.closings[:0]
		for _, c := range s.closings[s.head:] {
			if e, ok := s.closed[c.id]; ok && e.seq == c.seq {
				live = append(live, c)
			}
		}
		clear(s.closings[len(live):])
		s.closings, s.head = live, 0
	}
}

// remove forgets the view of id, open or closed. mu must be held.
func (s *store) remove(id string) {
	var session string
	if v, ok := s.open[id]; ok {
		session = v.Session
		delete(s.open, id)
	} else if e, ok := s.closed[id]; ok {
		session = e.view.Session
		delete(s.closed, id)
	} else {
		return
	}
	if ids, ok := s.sessions[session]; ok {
		delete(ids, id)
		if len(ids) == 0 {
			delete(s.sessions, session)
		}
	}
}

// index adds id to its session's IDs. mu must be held.
func (s *store) index(session, id string) {
	if session == "" {
		return
	}
	ids, ok := s.sessions[session]
	if !ok {
		ids = make(map[string]struct{}, 1)
		s.sessions[session] = ids
	}
	ids[id] = struct{}{}
}

// get returns the view of id.
func (s *store) get(id string) (*statusapi.Invocation, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if v, ok := s.open[id]; ok {
		return v, true
	}
	if e, ok := s.closed[id]; ok {
		return e.view, true
	}
	return nil, false
}

// filter selects views for a list.
type filter struct {
	status    statusapi.Status // "" for every status
	session   string           // "" for every session
	olderThan time.Duration    // 0 for any age
	now       time.Time
}

func (f filter) keep(v *statusapi.Invocation) bool {
	return (f.status == "" || v.Status == f.status) &&
		(f.session == "" || v.Session == f.session) &&
		(f.olderThan <= 0 || !v.Started.After(f.now.Add(-f.olderThan)))
}

// list returns the matching views, oldest Started first, then by ID.
func (s *store) list(f filter) []*statusapi.Invocation {
	var out []*statusapi.Invocation
	s.mu.RLock()
	switch {
	case f.session != "":
		for id := range s.sessions[f.session] {
			if v, ok := s.open[id]; ok && f.keep(v) {
				out = append(out, v)
			} else if e, ok := s.closed[id]; ok && f.keep(e.view) {
				out = append(out, e.view)
			}
		}
	default:
		if f.status == "" || f.status == statusapi.StatusPending {
			for _, v := range s.open {
				if f.keep(v) {
					out = append(out, v)
				}
			}
		}
		if f.status != statusapi.StatusPending {
			for _, e := range s.closed {
				if f.keep(e.view) {
					out = append(out, e.view)
				}
			}
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, byStarted)
	return out
}

func byStarted(a, b *statusapi.Invocation) int {
	if n := a.Started.Compare(b.Started); n != 0 {
		return n
	}
	return strings.Compare(a.ID, b.ID)
}

// recentlyClosed returns up to n closed views, the most recently closed
// first, and how many closed views there are.
func (s *store) recentlyClosed(n int) ([]*statusapi.Invocation, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*statusapi.Invocation, 0, min(n, len(s.closed)))
	for i := len(s.closings) - 1; i >= s.head && len(out) < n; i-- {
		c := s.closings[i]
		if e, ok := s.closed[c.id]; ok && e.seq == c.seq {
			out = append(out, e.view)
		}
	}
	return out, len(s.closed)
}

// counts returns how many open and closed views the store holds.
func (s *store) counts() (open, closed int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.open), len(s.closed)
}
