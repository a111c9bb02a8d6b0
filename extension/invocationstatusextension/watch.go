package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"errors"
	"slices"
	"strings"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// The session watch (GET /v1/sessions/{session}?wait=30s&after=<version>)
// gives every session a version that changes when a host that released
// the session should look again:
//
//   - the session appears (its first view) or vanishes (its last view is
//     evicted);
//   - owes_work changes;
//   - a turn the runtime started by itself begins: a running_turn owed
//     item (a wake span arrived) appears in one of its views;
//   - the session wakes by itself: an unattributed invocation
//     (unattributed_wakeup) joins it;
//   - one of its invocations turns final or incomplete, or is revised.
//
// A version is the store's count of changes over all sessions when the
// session last changed, so a session that vanishes and comes back never
// repeats a version; a session no view names has version 0. The state is
// kept under store.mu and updated in publish, which only closes a channel
// per changed session: the processor never waits for a watcher.

// reasonUnattributedWakeup is reasonUnattributedWakeup (this
// module does not import the contract): the reason of a turn nobody could
// own.
const reasonUnattributedWakeup = "unattributed_wakeup"

// errTooManyWatches is returned when max_session_watches watches wait.
var errTooManyWatches = errors.New("too many session watches waiting")

// watchState is the session watch's state; store.mu guards it.
type watchState struct {
	// max bounds waiters (max_session_watches).
	max     int
	waiters int
	// seq is the latest version given out, over all sessions.
	seq uint64
	// sessions holds an entry for every session with views, and for
	// every session watched while it has none.
	sessions map[string]*sessionWatch
}

// sessionWatch is one session's watch state.
type sessionWatch struct {
	version uint64
	// owing counts the session's open views that owe work.
	owing   int
	waiters int
	// changed is closed, and replaced, when the version changes or the
	// session vanishes.
	changed chan struct{}
}

func newWatchState(maxWatches int) watchState {
	return watchState{max: maxWatches, sessions: make(map[string]*sessionWatch)}
}

// entry returns the session's entry, made when missing.
func (w *watchState) entry(key string) *sessionWatch {
	sw, ok := w.sessions[key]
	if !ok {
		sw = &sessionWatch{changed: make(chan struct{})}
		w.sessions[key] = sw
	}
	return sw
}

// bump gives the session a new version and wakes its watchers.
func (w *watchState) bump(sw *sessionWatch) {
	w.seq++
	sw.version = w.seq
	close(sw.changed)
	sw.changed = make(chan struct{})
}

// owes reports whether the view owes work: an open invocation waiting on
// work, or a closed one that a late job or a wake made owe again.
func owes(v *statusapi.Invocation) bool {
	return v != nil && v.Waiting.OwesWork()
}

// newTurn reports whether v shows a running turn (a wake span arrived)
// that old did not: the session woke, so its watchers look again even
// when it owed work already.
func newTurn(old, v *statusapi.Invocation) bool {
	if v == nil || v.Waiting == nil {
		return false
	}
	for _, o := range v.Waiting.Owed {
		if !o.RunningTurn() {
			continue
		}
		if old == nil || old.Waiting == nil || !slices.ContainsFunc(old.Waiting.Owed, func(p statusapi.Owed) bool {
			return p.RunningTurn() && p.SpanID == o.SpanID
		}) {
			return true
		}
	}
	return false
}

// unattributed reports whether v is a turn nobody could own: its reasons
// carry unattributed_wakeup.
func unattributed(v *statusapi.Invocation) bool {
	return v != nil && slices.ContainsFunc(v.Reasons, func(r string) bool {
		return r == reasonUnattributedWakeup || strings.HasPrefix(r, reasonUnattributedWakeup+":")
	})
}

// sessionKeyOf returns the viewKey of v's session, "" when v is nil or
// names none.
func sessionKeyOf(v *statusapi.Invocation) string {
	if v == nil || v.Session == "" {
		return ""
	}
	return viewKey(v.Tenant, v.Session)
}

// watched updates the watch for one view replacing old (either may be
// nil: a first view, an eviction). The session index already holds the
// change. mu must be held.
func (s *store) watched(old, v *statusapi.Invocation) {
	oldKey, newKey := sessionKeyOf(old), sessionKeyOf(v)
	if oldKey != "" && oldKey != newKey {
		s.leave(oldKey, old)
	}
	if newKey == "" {
		return
	}
	sw := s.watch.entry(newKey)
	wasOwing := sw.owing > 0
	changed := false
	joined := oldKey != newKey
	if !joined && owes(old) {
		sw.owing--
	}
	if owes(v) {
		sw.owing++
	}
	if joined && len(s.sessions[newKey]) == 1 {
		changed = true // the session appears
	}
	if v.Open() && unattributed(v) && (joined || !unattributed(old)) {
		changed = true // it woke by itself
	}
	if newTurn(old, v) {
		changed = true // a turn the runtime started by itself began
	}
	if !v.Open() && (joined || old.Open() || old.Revision != v.Revision || old.Status != v.Status) {
		changed = true // final, incomplete, or revised
	}
	if wasOwing != (sw.owing > 0) {
		changed = true
	}
	if changed {
		s.watch.bump(sw)
	}
}

// leave updates the watch of the session key that view old left. mu must
// be held.
func (s *store) leave(key string, old *statusapi.Invocation) {
	sw, ok := s.watch.sessions[key]
	if !ok {
		return
	}
	wasOwing := sw.owing > 0
	if owes(old) {
		sw.owing--
	}
	switch {
	case len(s.sessions[key]) == 0:
		// Vanished: its watchers see version 0.
		close(sw.changed)
		sw.changed = make(chan struct{})
		sw.owing = 0
		if sw.waiters == 0 {
			delete(s.watch.sessions, key)
		}
	case wasOwing != (sw.owing > 0):
		s.watch.bump(sw)
	}
}

// versionLocked returns the session's version: 0 when no view names it.
// mu must be held.
func (s *store) versionLocked(key string) uint64 {
	if len(s.sessions[key]) == 0 {
		return 0
	}
	return s.watch.sessions[key].version
}

// awaitChange returns, when the tenant's session is at version after, a
// channel closed at its next change and a release to call once done
// waiting; else the version it is at. It fails with errTooManyWatches
// when max_session_watches watches wait already.
func (s *store) awaitChange(tenant, session string, after uint64) (changed <-chan struct{}, release func(), version uint64, err error) {
	key := viewKey(tenant, session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.versionLocked(key); v != after {
		return nil, nil, v, nil
	}
	if s.watch.waiters >= s.watch.max {
		return nil, nil, after, errTooManyWatches
	}
	sw := s.watch.entry(key)
	sw.waiters++
	s.watch.waiters++
	release = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		sw.waiters--
		s.watch.waiters--
		if sw.waiters == 0 && len(s.sessions[key]) == 0 && s.watch.sessions[key] == sw {
			delete(s.watch.sessions, key)
		}
	}
	return sw.changed, release, after, nil
}

// watchCounts returns how many watches wait and how many sessions the
// watch keeps state for (tests).
func (s *store) watchCounts() (waiters, sessions int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.watch.waiters, len(s.watch.sessions)
}
