package otelopencode

import "container/list"

// jobTable holds the background jobs whose followup is not settled yet,
// by key (the child session id of a subagent, the job id of a shell), in
// launch order. A job leaves it when its followup is settled, so it holds
// only jobs that still owe something; beyond max, add hands back the
// oldest, which the caller must drop fail-closed (mapper.dropJob).
type jobTable struct {
	max   int
	byKey map[string]*job
	// order holds the jobs oldest launch first; a job's elem is its
	// element.
	order list.List
}

func newJobTable(max int) *jobTable {
	return &jobTable{max: max, byKey: make(map[string]*job)}
}

// get returns the tracked job named key, or nil.
func (t *jobTable) get(key string) *job { return t.byKey[key] }

func (t *jobTable) len() int { return len(t.byKey) }

// add tracks jb and returns the oldest job, no longer tracked, when that
// makes more than max; otherwise nil.
func (t *jobTable) add(jb *job) (dropped *job) {
	t.byKey[jb.key] = jb
	jb.elem = t.order.PushBack(jb)
	if len(t.byKey) <= t.max {
		return nil
	}
	oldest := t.order.Front().Value.(*job)
	t.remove(oldest)
	return oldest
}

// remove stops tracking jb; it does nothing when jb is not tracked.
func (t *jobTable) remove(jb *job) {
	if jb.elem == nil {
		return
	}
	t.order.Remove(jb.elem)
	jb.elem = nil
	if t.byKey[jb.key] == jb {
		delete(t.byKey, jb.key)
	}
}
