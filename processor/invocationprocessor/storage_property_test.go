package invocationprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// flakySink is a next consumer that refuses the next calls when told to.
type flakySink struct {
	consumertest.TracesSink
	mu              sync.Mutex
	refuse          int // the next calls
	refuseSummaries int // the next calls carrying summaries
}

func (f *flakySink) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	f.mu.Lock()
	if f.refuse > 0 {
		f.refuse--
		f.mu.Unlock()
		return errInjected
	}
	if f.refuseSummaries > 0 && len(summarySpans([]ptrace.Traces{td})) > 0 {
		f.refuseSummaries--
		f.mu.Unlock()
		return errInjected
	}
	f.mu.Unlock()
	return f.TracesSink.ConsumeTraces(ctx, td)
}

// TestPropertyStorageCrashRestart delivers random invocation graphs
// (shuffled, duplicated, split into batches, across traces) to a processor
// with storage and crashes it at random moments: after an acknowledged
// batch, in the middle of a batch whose write fails (the sender retries it
// after the restart), after a write whose acknowledgement was lost (the
// sender sends it again), while the next consumer refuses summaries, and
// in a timer tick whose write fails; sometimes it restarts gracefully,
// sometimes a compaction runs. Every invocation must end with exactly one
// revision-1 summary, final, with the generator's exact totals; a summary
// sent twice is the same span.
func TestPropertyStorageCrashRestart(t *testing.T) {
	for it := range 30 {
		seed := uint64(it) + 1
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x5702a6e))
			g := &graphGen{r: r}
			for i := range 10 {
				g.invs = append(g.invs, g.invocation(fmt.Sprintf("inv-%d-%d", seed, i)))
			}
			g.linkConsumers()
			// The generator's adversities as TestPropertyFinalTotals
			// delivers them: first (taint carriers, late children that must
			// be in the first final) before the rest, after (uncounted
			// spans) once every invocation is closed.
			var first, after []sp
			for _, inv := range g.invs {
				first = append(first, inv.first...)
				if inv.taint == "" {
					after = append(after, inv.after...)
				}
			}
			var all []sp
			for _, inv := range g.invs {
				for _, s := range inv.spans {
					all = append(all, s)
					if r.IntN(8) == 0 {
						all = append(all, s)
					}
				}
			}
			r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			var batches [][]sp
			if len(first) > 0 {
				batches = append(batches, first)
			}
			for len(all) > 0 {
				n := 1 + r.IntN(min(8, len(all)))
				batches = append(batches, all[:n])
				all = all[n:]
			}

			mem := newMemStorage()
			clk := newFakeClock()
			sink := new(flakySink)
			// pending_delay: none, within remote_settle, beyond it; the
			// same across restarts.
			pendingDelay := []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond}[r.IntN(3)]
			mod := func(c *Config) {
				c.RemoteSettle = 40 * time.Millisecond
				c.PendingDelay = pendingDelay
				// Within retention a retried span is a duplicate; with
				// retention 0 it would start a new invocation, crash or not.
				c.Retention = time.Duration(5+r.IntN(10)) * time.Second
			}
			start := func() *harness {
				h := newStoredHarness(t, mem, clk, &sink.TracesSink, mod)
				h.p.next = sink
				if r.IntN(3) == 0 {
					h.p.store.compactMin = 1
				}
				return h
			}
			h := start()
			crashes := 0
			// send is the sender: it retries until the batch is accepted.
			send := func(td ptrace.Traces) {
				for {
					err := h.p.ConsumeTraces(context.Background(), td)
					if err == nil {
						return
					}
					require.ErrorIs(t, err, errInjected)
				}
			}
			for i := 0; i < len(batches); i++ {
				td := batch(batches[i]...)
				switch r.IntN(12) {
				case 0: // crash in the middle of the batch: its write fails, the sender retries it later
					mem.setFailWrites(true)
					require.Error(t, h.p.ConsumeTraces(context.Background(), td))
					mem.setFailWrites(false)
					h, crashes = start(), crashes+1
					i--
					continue
				case 1: // the batch was written but its acknowledgement was lost
					send(td)
					h, crashes = start(), crashes+1
					i--
					continue
				case 2: // graceful restart
					send(td)
					h.shutdown()
					h = start()
					continue
				case 3: // the next consumer refuses: the sender retries the batch
					sink.mu.Lock()
					sink.refuse = 1 + r.IntN(2)
					sink.mu.Unlock()
					if h.p.ConsumeTraces(context.Background(), td) != nil {
						i--
					}
					if r.IntN(2) == 0 {
						h, crashes = start(), crashes+1
					}
					continue
				case 4: // a tick whose write fails, then a crash
					mem.setFailWrites(true)
					_ = h.p.tick(context.Background(), clk.Advance(time.Duration(r.IntN(100))*time.Millisecond))
					mem.setFailWrites(false)
					h, crashes = start(), crashes+1
				}
				send(td)
				if r.IntN(3) == 0 {
					_ = h.p.tick(context.Background(), clk.Advance(time.Duration(r.IntN(60))*time.Millisecond))
				}
			}
			settle := func() {
				for range 3 {
					clk.Advance(200 * time.Millisecond)
					for h.p.tick(context.Background(), clk.Now()) != nil {
					}
				}
			}
			settle()
			t.Logf("%d batches, %d crashes", len(batches), crashes)
			closedBefore := map[string]int{}
			for _, inv := range g.invs {
				closedBefore[inv.id] = len(h.of(inv.id))
			}
			// The uncounted spans after the final, through one more crash.
			for i, s := range after {
				send(batch(s))
				if i == len(after)/2 {
					h, crashes = start(), crashes+1
				}
			}
			settle()

			for _, inv := range g.invs {
				got := h.of(inv.id)
				if inv.taint != "" {
					requireNeverFinal(t, inv, got)
					continue
				}
				if len(inv.after) > 0 {
					last := got[len(got)-1]
					require.Greater(t, len(got), closedBefore[inv.id], "%s: no revision for the late spans", inv.id)
					require.Equal(t, contract.StatusFinal, strAttr(last, contract.AttrStatus), "%s: reasons %v", inv.id, strsAttr(last, contract.AttrIncompleteReasons))
					assertTotals(t, inv.id, inv.expLate, last)
				}
				firsts := map[string]ptrace.Span{}
				for _, s := range got {
					st := strAttr(s, contract.AttrStatus)
					require.NotEqual(t, contract.StatusIncomplete, st, "%s: reasons %v", inv.id, strsAttr(s, contract.AttrIncompleteReasons))
					if st == contract.StatusPending || intAttr(s, contract.AttrRevision) != 1 {
						continue
					}
					key := s.SpanID().String()
					if prev, ok := firsts[key]; ok {
						require.Equal(t, prev.Attributes().AsRaw(), s.Attributes().AsRaw(), "%s: a re-sent summary differs", inv.id)
					}
					firsts[key] = s
				}
				require.Len(t, firsts, 1, "%s: distinct revision-1 summaries", inv.id)
				for _, final := range firsts {
					require.Equal(t, contract.StatusFinal, strAttr(final, contract.AttrStatus), inv.id)
					assertTotals(t, inv.id, inv.exp, final)
				}
			}
		})
	}
}
