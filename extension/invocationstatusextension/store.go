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
// published: the store hands out the same pointers to readers. A view is
// known by its tenant and ID together (viewKey): tenants may reuse each
// other's invocation IDs and session names.
type store struct {
	maxClosed      int
	maxClosedBytes int64

	// mu guards every field below: the open and closed views by viewKey,
	// the closing order, and the session index.
	mu     sync.RWMutex
	open   map[string]*statusapi.Invocation
	closed map[string]*closedEntry
	// closedBytes is the closed views' estimated size (viewBytes).
	closedBytes int64
	// closings lists closed views in the order they were stored, oldest
	// first, from head; an entry whose seq no longer matches closed[id] is
	// stale (revised, reopened) and skipped.
	closings []closing
	head     int
	seq      uint64
	// sessions maps a session (viewKey of tenant and session) to the keys
	// of its open and closed views.
	sessions map[string]map[string]struct{}
	// watch is the session watch's state (watch.go).
	watch watchState
}

// viewKey joins a tenant and an invocation ID (or a session name). A
// tenant never holds NUL, so no two pairs share a key.
func viewKey(tenant, id string) string { return tenant + "\x00" + id }

type closedEntry struct {
	view  *statusapi.Invocation
	seq   uint64
	bytes int64
}

type closing struct {
	key string
	seq uint64
}

func newStore(maxClosed int, maxClosedBytes int64, maxWatches int) *store {
	return &store{
		maxClosed:      maxClosed,
		maxClosedBytes: maxClosedBytes,
		open:           make(map[string]*statusapi.Invocation),
		closed:         make(map[string]*closedEntry),
		sessions:       make(map[string]map[string]struct{}),
		watch:          newWatchState(maxWatches),
	}
}

// publish records each view in order, replacing the earlier view of its
// tenant and ID.
func (s *store) publish(views []statusapi.Invocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range views {
		v := views[i] // a copy: the caller keeps its slice
		key := viewKey(v.Tenant, v.ID)
		old := s.remove(key)
		s.index(v.Tenant, v.Session, key)
		if v.Open() {
			s.open[key] = &v
		} else {
			s.seq++
			e := &closedEntry{view: &v, seq: s.seq, bytes: viewBytes(&v)}
			s.closed[key] = e
			s.closedBytes += e.bytes
			s.closings = append(s.closings, closing{key: key, seq: s.seq})
		}
		s.watched(old, &v)
	}
	for len(s.closed) > s.maxClosed || s.closedBytes > s.maxClosedBytes && len(s.closed) > 0 {
		c := s.closings[s.head]
		s.head++
		if e, ok := s.closed[c.key]; ok && e.seq == c.seq {
			s.watched(s.remove(c.key), nil)
		}
	}
	// Drop the consumed prefix and stale entries once they outnumber the
	// live ones, so closings stays within twice the closed views.
	if s.head > 0 && len(s.closings) > 2*len(s.closed)+64 {
		live := s.closings[:0]
		for _, c := range s.closings[s.head:] {
			if e, ok := s.closed[c.key]; ok && e.seq == c.seq {
				live = append(live, c)
			}
		}
		clear(s.closings[len(live):])
		s.closings, s.head = live, 0
	}
}

// remove forgets the view of key, open or closed, and returns it (nil
// when there was none). mu must be held.
func (s *store) remove(key string) *statusapi.Invocation {
	var v *statusapi.Invocation
	if o, ok := s.open[key]; ok {
		v = o
		delete(s.open, key)
	} else if e, ok := s.closed[key]; ok {
		v = e.view
		s.closedBytes -= e.bytes
		delete(s.closed, key)
	} else {
		return nil
	}
	session := viewKey(v.Tenant, v.Session)
	if keys, ok := s.sessions[session]; ok {
		delete(keys, key)
		if len(keys) == 0 {
			delete(s.sessions, session)
		}
	}
	return v
}

// index adds a view's key to its session's. mu must be held.
func (s *store) index(tenant, session, key string) {
	if session == "" {
		return
	}
	session = viewKey(tenant, session)
	keys, ok := s.sessions[session]
	if !ok {
		keys = make(map[string]struct{}, 1)
		s.sessions[session] = keys
	}
	keys[key] = struct{}{}
}

// get returns the view of the tenant's invocation id.
func (s *store) get(tenant, id string) (*statusapi.Invocation, bool) {
	key := viewKey(tenant, id)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if v, ok := s.open[key]; ok {
		return v, true
	}
	if e, ok := s.closed[key]; ok {
		return e.view, true
	}
	return nil, false
}

// filter selects views for a list.
type filter struct {
	status  statusapi.Status // "" for every status
	session string           // "" for every session; a session is the tenant's
	// tenant keeps one tenant's views when byTenant is set ("" for the
	// views without a tenant); a session filter always reads it.
	tenant    string
	byTenant  bool
	olderThan time.Duration // 0 for any age
	now       time.Time
}

func (f filter) keep(v *statusapi.Invocation) bool {
	return (f.status == "" || v.Status == f.status) &&
		(f.session == "" || v.Session == f.session && v.Tenant == f.tenant) &&
		(!f.byTenant || v.Tenant == f.tenant) &&
		(f.olderThan <= 0 || !v.Started.After(f.now.Add(-f.olderThan)))
}

// list returns the matching views, oldest Started first, then by ID.
func (s *store) list(f filter) []*statusapi.Invocation {
	s.mu.RLock()
	out := s.listLocked(f)
	s.mu.RUnlock()
	slices.SortFunc(out, byStarted)
	return out
}

// session returns the views of the tenant's session, oldest Started
// first, and the session's watch version, read together.
func (s *store) session(tenant, session string) ([]*statusapi.Invocation, uint64) {
	s.mu.RLock()
	out := s.listLocked(filter{session: session, tenant: tenant, byTenant: true})
	version := s.versionLocked(viewKey(tenant, session))
	s.mu.RUnlock()
	slices.SortFunc(out, byStarted)
	return out, version
}

// listLocked returns the matching views in no order. mu must be held.
func (s *store) listLocked(f filter) []*statusapi.Invocation {
	var out []*statusapi.Invocation
	switch {
	case f.session != "":
		for key := range s.sessions[viewKey(f.tenant, f.session)] {
			if v, ok := s.open[key]; ok && f.keep(v) {
				out = append(out, v)
			} else if e, ok := s.closed[key]; ok && f.keep(e.view) {
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
	return out
}

func byStarted(a, b *statusapi.Invocation) int {
	if n := a.Started.Compare(b.Started); n != 0 {
		return n
	}
	return strings.Compare(viewKey(a.Tenant, a.ID), viewKey(b.Tenant, b.ID))
}

// recentlyClosed returns up to n closed views that f keeps (its tenant
// alone when byTenant, its session alone when set), the most recently
// closed first, and how many closed views it keeps.
func (s *store) recentlyClosed(n int, f filter) ([]*statusapi.Invocation, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*statusapi.Invocation, 0, min(n, len(s.closed)))
	keep := func(v *statusapi.Invocation) bool {
		return (!f.byTenant || v.Tenant == f.tenant) && (f.session == "" || v.Session == f.session && v.Tenant == f.tenant)
	}
	total := len(s.closed)
	if f.byTenant || f.session != "" {
		total = 0
		for _, e := range s.closed {
			if keep(e.view) {
				total++
			}
		}
	}
	for i := len(s.closings) - 1; i >= s.head && len(out) < n; i-- {
		c := s.closings[i]
		if e, ok := s.closed[c.key]; ok && e.seq == c.seq && keep(e.view) {
			out = append(out, e.view)
		}
	}
	return out, total
}

// counts returns how many open and closed views the store holds.
func (s *store) counts() (open, closed int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.open), len(s.closed)
}

// viewOverhead is what a closed view costs besides its strings and lists:
// the struct, its times, the map entries that find it, rounded up.
const viewOverhead = 1024

// viewBytes estimates a view's size: its strings and lists (its recorded
// spans too), whatever a sender made them, and a fixed overhead. Its error is the overhead's:
// within about a kilobyte of the heap a view holds.
func viewBytes(v *statusapi.Invocation) int64 {
	n := int64(viewOverhead + 2*len(v.ID) + len(v.Tenant) + len(v.Session) + len(v.Agent) + len(v.Service))
	for _, l := range [][]string{v.TraceIDs, v.Reasons, v.Anomalies} {
		for _, s := range l {
			n += int64(16 + len(s))
		}
	}
	return n + timelineBytes(v.Timeline)
}
