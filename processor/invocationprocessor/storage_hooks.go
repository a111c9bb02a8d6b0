package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// The functions in this file restore what the journal recorded
// (storage_load.go's replay) with the shard's own operations where one
// exists. They are not the only storage code that touches the ledger's
// fields: storage_closed.go encodes and decodes a closed invocation's
// state, and replay feeds stored spans through invocation.add.

// restoreInvocation returns the invocation with the id, creating it as a
// span arriving at t would (without evicting: the bound is enforced after
// the load, and a replay re-applies the recorded evictions). mu must be
// held.
func (p *invocationProcessor) restoreInvocation(s *shard, id string, t int64, stats *stats) *invocation {
	return s.ensure(id, t, stats)
}

// replayEmission re-applies a recorded summary to the invocation's state as
// the shard took it at time t: a pending marks the pending as sent, a first
// final or incomplete closes the invocation (with the recorded forced
// reason), a later revision records the revision. With remake (the stored
// summary could not be read back) it returns the summary made again from
// the restored state: the one the close makes, else a snapshot at t with
// the recorded status and revision. mu must be held.
func (p *invocationProcessor) replayEmission(s *shard, inv *invocation, ev *journal.Event, t int64, remake bool, stats *stats) (remade summary.Summary) {
	switch {
	case ev.Revision == 0:
		if remake {
			remade = inv.snapshot(contract.StatusPending, 0, t, s.cfg)
		}
		inv.PendingSent = true
	case inv.Phase == phaseOpen:
		status := ev.Status
		if status != contract.StatusFinal {
			status = contract.StatusIncomplete
		}
		// The summary closeInvocation makes again is the recorded one.
		made := len(s.outbox)
		s.closeInvocation(inv, status, ev.Forced, t, stats)
		if remake && len(s.outbox) > made {
			remade = s.outbox[made]
			remade.Revision = max(ev.Revision, 1)
		}
		clear(s.outbox[made:])
		s.outbox = s.outbox[:made]
		if ev.Revision > 1 {
			inv.Revision = ev.Revision
		}
	default:
		if remake {
			remade = inv.snapshot(ev.Status, ev.Revision, t, s.cfg)
		}
		inv.Revision = max(inv.Revision, ev.Revision)
		inv.Dirty = false
		inv.LastSummary = t
	}
	return remade
}

// taintInvocation marks an invocation whose stored state was partly lost:
// its totals can no longer be proven, so it can never be final. A closed
// invocation gets a corrected summary saying so. mu must be held.
func taintInvocation(inv *invocation) {
	inv.Taint(reasonStorageLost)
}

// rearm re-schedules an invocation's timer after a restart. The restart
// counts as an arrival: while the collector was down nothing could be seen
// arriving, so a remote subtree's settle time starts again now; an
// open_timeout or retention that passed while down fires at the next tick.
func (p *invocationProcessor) rearm(s *shard, inv *invocation, now int64) {
	inv.LastArrival = max(inv.LastArrival, now)
	inv.Resettle(now)
	s.schedule(inv)
}

// evaluateLoaded decides, for every open invocation just loaded, what a
// timer firing now would: one whose obligations are met is closed (a
// remote one once it settled), one past open_timeout closes incomplete.
// Oldest first, so the summaries are made in a stable order. mu must be
// held, inside a journalled section.
func (p *invocationProcessor) evaluateLoaded(s *shard, now int64, stats *stats) {
	for inv := s.open.head; inv != nil; {
		next := inv.index.next
		s.evaluate(inv, now, stats)
		inv = next
	}
}

// publishRestored hands the status extension (if one is configured) the
// views of the invocations loaded from storage: open ones as they stand,
// closed ones as a summary made now would say.
func (p *invocationProcessor) publishRestored() {
	now := p.clock.Now().UnixNano()
	for _, s := range p.shards {
		s.mu.Lock()
		if s.status != nil {
			var open []*invocation
			var closed []statusapi.Invocation
			for _, inv := range s.invs {
				if inv.Phase == phaseOpen {
					open = append(open, inv)
					continue
				}
				sum := inv.snapshot(inv.status(now, s.cfg), inv.Revision, now, s.cfg)
				closed = append(closed, inv.closedView(&sum, now, s.cfg))
			}
			s.publishOpen(open, now)
			if len(closed) > 0 {
				s.status.PublishInvocations(closed)
			}
		}
		s.mu.Unlock()
	}
}
