package ledger

import "github.com/agentledger/agentledger/contract"

// ExportLost records that the export pipeline lost a span of invocation id
// that the ledger counted (detail: "queue" when the batching processor
// dropped it, "failed" when its export failed): the collector can never
// see it, so the invocation is never final (export_lost:<detail>). An
// invocation that closed already is revised; one the ledger no longer
// holds is left alone.
func (l *Ledger) ExportLost(id, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	if _, ok := l.held.get(id); !ok {
		return
	}
	now := l.clock.Now()
	inv := l.lookup(id, now)
	inv.fail(contract.ReasonExportLost, detail)
	if inv.status != contract.StatusPending {
		l.revise(inv, now)
	}
}
