package otelopencode

import "sort"

func (m *mapper) session(id string) *sessionState {
	s, ok := m.sessions[id]
	if !ok {
		s = &sessionState{
			id:         id,
			users:      make(map[string]*userMsg),
			assistants: make(map[string]*assistantMsg),
			tools:      make(map[string]*toolPart),
			turns:      make(map[string]*turn),
		}
		m.sessions[id] = s
		m.seq++
		s.lastUse = m.seq
		// The new session is the most recently used: never its own victim.
		m.evict()
		return s
	}
	m.seq++
	s.lastUse = m.seq
	return s
}

// evict forgets the least recently used sessions that owe nothing, beyond
// maxSessions.
func (m *mapper) evict() {
	if len(m.sessions) <= m.maxSessions {
		return
	}
	var idle []*sessionState
	for _, s := range m.sessions {
		if !s.busy() {
			idle = append(idle, s)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUse < idle[j].lastUse })
	for _, s := range idle {
		if len(m.sessions) <= m.maxSessions {
			return
		}
		delete(m.sessions, s.id)
		m.evicted++
		if m.onEvict != nil {
			m.onEvict()
		}
	}
}
