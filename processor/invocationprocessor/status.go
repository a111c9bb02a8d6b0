package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// StatusSink receives the processor's live view of its invocations. The
// extension named by the status key (invocation_status) implements it;
// the processor finds it by that id in Start.
type StatusSink interface {
	// PublishInvocations records the latest view of each invocation; a
	// later view of an ID replaces the earlier one. Open invocations are
	// published when a batch changes them, closed ones with each final or
	// incomplete summary. It is called with a shard's lock held, so the
	// views of one invocation arrive in the order they were made; it must
	// not block, keep the slice, or call back into the processor.
	PublishInvocations(views []statusapi.Invocation)
}

// maxWaitEntries bounds the missing-children and expected-followup entries
// of one published view; the rest are counted in Waiting.Truncated.
const maxWaitEntries = 32

// maxRemoteNames bounds the remote span names of one published view.
const maxRemoteNames = 8

// jobTimes are a background span's start and end (Unix nanoseconds of the
// agent's clock), kept to say since when a followup is expected.
type jobTimes struct {
	SpanID pcommon.SpanID
	Start  uint64
	End    uint64
}

// noteJob remembers when a background span ran. A span ID is indexed
// once, so it is noted once. Only an open invocation's view reads the
// times (a closed one's view is its summary's), so a closed invocation
// keeps none (dropJobTimes).
func (inv *invocation) noteJob(id pcommon.SpanID, start, end uint64) {
	if inv.Phase == phaseClosed {
		return
	}
	inv.JobTimes = append(inv.JobTimes, jobTimes{SpanID: id, Start: start, End: end})
}

// dropJobTimes releases the background spans' times when the invocation
// closes: nothing reads them after.
func (inv *invocation) dropJobTimes() { inv.JobTimes = nil }

// jobTimesOf returns a lookup of the background spans' times: a linear
// search for a few jobs, a map built once for many.
func (inv *invocation) jobTimesOf() func(pcommon.SpanID) jobTimes {
	if len(inv.JobTimes) <= 8 {
		return func(id pcommon.SpanID) jobTimes {
			for _, jt := range inv.JobTimes {
				if jt.SpanID == id {
					return jt
				}
			}
			return jobTimes{}
		}
	}
	byID := make(map[pcommon.SpanID]jobTimes, len(inv.JobTimes))
	for _, jt := range inv.JobTimes {
		byID[jt.SpanID] = jt
	}
	return func(id pcommon.SpanID) jobTimes { return byID[id] }
}

// startStatus finds the status extension named in the config, if any,
// and hands it to every shard.
func (p *invocationProcessor) startStatus(host component.Host) error {
	if p.statusID == nil {
		return nil
	}
	ext, ok := host.GetExtensions()[*p.statusID]
	if !ok {
		return fmt.Errorf("status: extension %q is not configured (add it under extensions and service::extensions)", p.statusID)
	}
	sink, ok := ext.(StatusSink)
	if !ok {
		return fmt.Errorf("status: extension %q does not take invocation state (use an invocation_status extension)", p.statusID)
	}
	if l, ok := sink.(nameLimiter); ok {
		l.LimitNames(p.limits.nameBytes)
	}
	for _, s := range p.shards {
		s.mu.Lock()
		s.status = sink
		s.mu.Unlock()
	}
	return nil
}

// nameLimiter is a StatusSink that is told max_name_bytes, so that it
// refuses questions about a session longer than the ledger keeps (the
// ledger cut it, and no answer about the long name would be true).
type nameLimiter interface {
	LimitNames(maxBytes int)
}

// publishClosed publishes the view of inv's final or incomplete summary
// just added to the outbox. s.mu must be held.
func (s *shard) publishClosed(inv *invocation, now int64) {
	if s.status == nil {
		return
	}
	s.status.PublishInvocations([]statusapi.Invocation{inv.closedView(&s.outbox[len(s.outbox)-1], now, s.cfg)})
}

// closedView is the closed invocation as its summary sum shows it, with
// when the caller got its result and the spans it recorded (its page
// draws them).
func (inv *invocation) closedView(sum *summary.Summary, now int64, cfg *ledgerConfig) statusapi.Invocation {
	v := summaryView(sum, now)
	if inv.RootArrived {
		resultAt := spanTime(inv.RootEnd)
		v.ResultAt = &resultAt
	}
	v.Timeline = inv.timelineView(cfg.timelineSpans)
	// Work that arrived after the close (a late job's followup, a woken
	// turn) is owed though the invocation is closed.
	if owed, left := owedView(inv.owed(now, cfg)); len(owed) > 0 {
		v.Waiting = &statusapi.Waiting{Owed: owed, Truncated: left, OpenTimeoutAt: unixTime(inv.owingRetentionEnd(cfg))}
	}
	return v
}

// publishOpen publishes the views of the invocations a batch touched that
// are still open (the closed ones were published as they closed). s.mu
// must be held.
func (s *shard) publishOpen(touched []*invocation, now int64) {
	if s.status == nil {
		return
	}
	var views []statusapi.Invocation
	for _, inv := range touched {
		if inv.Phase == phaseOpen && s.live(inv) {
			views = append(views, inv.statusView(now, s.cfg))
		}
	}
	if len(views) > 0 {
		s.status.PublishInvocations(views)
	}
}

func unixTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func spanTime(ns uint64) time.Time { return time.Unix(0, int64(ns)).UTC() }

func serviceName(res map[string]any) string {
	s, _ := res["service.name"].(string)
	return s
}

// summaryView is a closed invocation as its latest summary s shows it.
func summaryView(s *summary.Summary, now int64) statusapi.Invocation {
	closed := unixTime(now)
	traces := []string{s.TraceID.String()}
	for _, l := range s.Links {
		if t := l.TraceID.String(); !slices.Contains(traces, t) {
			traces = append(traces, t)
		}
	}
	v := viewOf(s.ID, s.ConversationID, s.AgentName, s.Resource)
	v.Status, v.Revision = statusapi.Status(s.Status), s.Revision
	v.Started, v.ClosedAt = spanTime(s.Start), &closed
	v.Usage = usageView(s.Usage)
	v.AfterResult = statusapi.AfterResult{InputTokens: s.AfterIn, OutputTokens: s.AfterOut}
	v.ModelCalls, v.BackgroundJobs, v.Continuations = s.ModelCalls, s.BackgroundJobs, s.Continuations
	v.Spans = s.Spans
	v.TraceIDs = traces
	v.Reasons, v.Anomalies = slices.Clone(s.Reasons), slices.Clone(s.Anomalies)
	return v
}

// viewOf starts an invocation's view with what names it: its ledger key
// split into id and tenant, session, agent and service.
func viewOf(key, session, agent string, res map[string]any) statusapi.Invocation {
	tenant, id := summary.SplitKey(key)
	return statusapi.Invocation{ID: id, Tenant: tenant, Session: session, Agent: agent, Service: serviceName(res)}
}

// usageView is the view's form of usage totals.
func usageView(u ledgerrule.Usage) statusapi.Usage {
	return statusapi.Usage{
		InputTokens: u.Input, OutputTokens: u.Output,
		CacheReadInputTokens: u.CacheRead, CacheCreationInputTokens: u.CacheCreation,
		ReasoningOutputTokens: u.Reasoning,
	}
}

// statusView is an open invocation as it stands at now, with what it
// waits on.
func (inv *invocation) statusView(now int64, cfg *ledgerConfig) statusapi.Invocation {
	lastSeen := unixTime(inv.LastArrival)
	v := viewOf(inv.ID, inv.ConversationID, inv.AgentName, inv.Resource)
	v.Status, v.Started, v.LastSeen = statusapi.StatusPending, spanTime(inv.MinStart), &lastSeen
	v.Usage = usageView(inv.Usage)
	v.AfterResult = statusapi.AfterResult{InputTokens: inv.AfterInput, OutputTokens: inv.AfterOutput}
	v.ModelCalls, v.BackgroundJobs, v.Continuations = inv.ModelCalls, inv.BackgroundJobs, inv.Continuations
	v.Spans = inv.Indexed
	v.TraceIDs = []string{}
	v.Reasons, v.Anomalies = inv.reasons(now, cfg), inv.anomalies(false)
	v.Waiting, v.Timeline = inv.waiting(now, cfg), inv.timelineView(cfg.timelineSpans)
	switch {
	case inv.RootArrived:
		resultAt := spanTime(inv.RootEnd)
		v.Started, v.ResultAt = spanTime(inv.RootStart), &resultAt
		v.TraceIDs = append(v.TraceIDs, inv.RootTraceID.String())
	case len(inv.Traces) > 0:
		v.TraceIDs = append(v.TraceIDs, inv.Traces[0].String()) // the first trace seen
	}
	for _, c := range inv.ContinuationRoots {
		if t := c.TraceID.String(); !slices.Contains(v.TraceIDs, t) {
			v.TraceIDs = append(v.TraceIDs, t)
		}
	}
	return v
}

// waiting lists what the open invocation waits on, from the same span
// states reasons() reads.
func (inv *invocation) waiting(now int64, cfg *ledgerConfig) *statusapi.Waiting {
	w := &statusapi.Waiting{
		RootMissing:   !inv.RootArrived,
		OpenTimeoutAt: unixTime(satAdd(inv.FirstArrival, cfg.openTimeout)),
	}
	var remote []string
	parentIdx := map[int32]int{}
	jobTimesOf := inv.jobTimesOf()
	for _, span := range inv.Spans {
		id := span.ID
		if !span.Arrived {
			continue
		}
		if missing := span.DeclaredChildren - span.ArrivedChildren; span.DeclaredChildren >= 0 && missing > 0 {
			i, ok := parentIdx[span.Name]
			if !ok {
				i = len(w.MissingChildren)
				parentIdx[span.Name] = i
				w.MissingChildren = append(w.MissingChildren, statusapi.MissingChildren{Parent: inv.Name(span.Name)})
			}
			w.MissingChildren[i].Missing += int(missing)
			w.MissingChildren[i].Parents++
		}
		if declared, arrived := inv.Followups(id); declared >= 0 && declared > arrived {
			missing := declared - arrived
			jt := jobTimesOf(pcommon.SpanID(id))
			w.ExpectedFollowups = append(w.ExpectedFollowups, statusapi.ExpectedFollowup{
				Job: inv.Name(span.Name), SpanID: id.String(), Started: spanTime(jt.Start), Ended: spanTime(jt.End), Missing: int(missing),
			})
		}
		if name := inv.Name(span.Name); span.Remote && !slices.Contains(remote, name) {
			remote = append(remote, name)
		}
	}
	slices.SortFunc(w.MissingChildren, func(a, b statusapi.MissingChildren) int { return strings.Compare(a.Parent, b.Parent) })
	slices.SortFunc(w.ExpectedFollowups, func(a, b statusapi.ExpectedFollowup) int {
		if n := a.Started.Compare(b.Started); n != 0 {
			return n
		}
		return strings.Compare(a.SpanID, b.SpanID)
	})
	if n := len(w.MissingChildren) - maxWaitEntries; n > 0 {
		w.Truncated += n
		w.MissingChildren = w.MissingChildren[:maxWaitEntries]
	}
	if n := len(w.ExpectedFollowups) - maxWaitEntries; n > 0 {
		w.Truncated += n
		w.ExpectedFollowups = w.ExpectedFollowups[:maxWaitEntries]
	}
	if inv.HasRemote && !inv.settled(now, cfg) {
		slices.Sort(remote)
		w.RemoteSettling = &statusapi.RemoteSettling{
			Spans: remote[:min(len(remote), maxRemoteNames)],
			Until: unixTime(inv.SettleDue(&cfg.graph)),
		}
	}
	w.Owed, _ = owedView(inv.owed(now, cfg))
	w.Unprovable = slices.Sorted(slices.Values(slices.Concat(inv.Invalid(), inv.Taints())))
	if inv.SpanLimitHit {
		w.Unprovable = append(w.Unprovable, reasonSpanLimit)
	}
	return w
}
