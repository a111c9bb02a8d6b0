package ledgerrule

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

// world is a well-formed invocation as the work produced it: every span
// it will ever have, and for each the span whose arrival announces it
// (the ground truth of what is owed once some of them arrived).
type world struct {
	spans []Span
	// announcer[i] is the index of the span that, once arrived, makes
	// span i owed until it arrives (-1: nothing announces it).
	announcer []int
}

// genWorld draws an invocation: a root with tools, chats and background
// jobs (some launched from tools), each job followed up by continuations
// (with their wake spans and chats) or followup_closed spans, and spans
// started in new traces that the root declares as detached.
func genWorld(r *rand.Rand) *world {
	w := &world{}
	next := uint64(0)
	newID := func() SpanID { next++; return SpanID{byte(next >> 8), byte(next), 1} }
	traceN := byte(0)
	newTrace := func() TraceID { traceN++; return TraceID{traceN, 7} }
	add := func(s Span, announcer int) int {
		s.Member, s.InvocationID = true, "inv"
		w.spans = append(w.spans, s)
		w.announcer = append(w.announcer, announcer)
		return len(w.spans) - 1
	}
	// declare sets a span's invocation.children to its counted children.
	children := map[int]int{}
	child := func(parent int, s Span) int {
		s.Parent, s.Trace = w.spans[parent].ID, w.spans[parent].Trace
		children[parent]++
		return add(s, parent)
	}
	rootTrace := newTrace()
	root := add(Span{Name: "invoke_agent a", Trace: rootTrace, ID: newID(), Facts: Facts{Role: RoleRoot}}, -1)
	var jobs []int
	for range r.IntN(4) {
		switch r.IntN(3) {
		case 0:
			child(root, Span{Name: "chat m", ID: newID(), Facts: Facts{ModelCall: true}})
		case 1:
			tool := child(root, Span{Name: "execute_tool shell", ID: newID()})
			if r.IntN(2) == 0 {
				jobs = append(jobs, child(tool, Span{Name: "background shell", ID: newID(), Facts: Facts{Role: RoleBackground}}))
			}
		default:
			jobs = append(jobs, child(root, Span{Name: "background task", ID: newID(), Facts: Facts{Role: RoleBackground}}))
		}
	}
	for _, j := range jobs {
		n := r.IntN(3)
		w.spans[j].Followups = Count{CountValid, int64(n)}
		for range n {
			l := Link{Trace: w.spans[j].Trace, Span: w.spans[j].ID, Kind: LinkFollowup}
			if r.IntN(3) == 0 {
				s := Span{Name: "followup_closed", Trace: newTrace(), ID: newID(), Facts: Facts{Role: RoleFollowupClosed}}
				s.Links.Add(l)
				add(s, j)
				continue
			}
			s := Span{Name: "continue_agent a", Trace: newTrace(), ID: newID(), Facts: Facts{Role: RoleContinuation}}
			s.Links.Add(l)
			cont := add(s, j)
			// The wake: its arrival announces the continuation (which
			// the job announces already).
			wake := child(cont, Span{Name: "wake_agent a", ID: newID(), Facts: Facts{Role: RoleWake}})
			_ = wake
			for range r.IntN(2) {
				child(cont, Span{Name: "chat m", ID: newID(), Facts: Facts{ModelCall: true}})
			}
		}
	}
	if d := r.IntN(3); d > 0 {
		w.spans[root].Detached = Count{CountValid, int64(d)}
		for range d {
			s := Span{Name: "subagent", Trace: newTrace(), ID: newID()}
			s.Links.Add(Link{Trace: rootTrace, Span: w.spans[root].ID, Kind: LinkDetachedFrom})
			add(s, root)
		}
	}
	for i := range w.spans {
		w.spans[i].Children = Count{CountValid, int64(children[i])}
		for k := range w.spans[i].Usage {
			w.spans[i].Usage[k] = 1
		}
		if w.spans[i].ModelCall {
			w.spans[i].UsagePresent = 3
		}
	}
	return w
}

// owedByTruth reports whether, with the spans in arrived, some span is
// owed: it has not arrived and its announcer has, or it is a turn whose
// wake arrived before it.
func (w *world) owedByTruth(arrived []bool) bool {
	for i := range w.spans {
		if arrived[i] {
			continue
		}
		if a := w.announcer[i]; a >= 0 && arrived[a] {
			return true
		}
		// A wake announces its parent turn.
		for k := range w.spans {
			if arrived[k] && w.spans[k].Role == RoleWake && w.spans[k].Parent == w.spans[i].ID {
				return true
			}
		}
	}
	return false
}

// TestOwesProperty: over random well-formed invocations delivered in a
// random order, any prefix of it, with duplicates, Graph.Owes is empty
// exactly when the ground truth owes nothing: owes_work false never
// hides owed work, and no work is owed that is not. OwesWork agrees, the
// owed reasons are among Reasons, and a stored state owes the same.
func TestOwesProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 1))
	cfg := &GraphConfig{MaxSpans: 1000, Settle: 5}
	for n := range 4000 {
		w := genWorld(r)
		order := r.Perm(len(w.spans))
		cut := r.IntN(len(order) + 1)
		var g Graph
		g.Init(1)
		arrived := make([]bool, len(w.spans))
		for k, i := range order[:cut] {
			g.Arrive(&w.spans[i], int64(2+k), cfg)
			arrived[i] = true
			if r.IntN(5) == 0 { // a duplicate delivery
				g.Arrive(&w.spans[i], int64(2+k), cfg)
			}
			if r.IntN(20) == 0 && g.RootArrived && !g.IsShut {
				g.Shut()
			}
		}
		now := int64(1000)
		owed := g.Owes(now, cfg)
		truth := w.owedByTruth(arrived)
		if truth != (len(owed) > 0) {
			t.Fatalf("world %d, %d of %d spans: truth owes %v, Owes %+v", n, cut, len(w.spans), truth, owed)
		}
		if g.OwesWork(now, cfg) != (len(owed) > 0) {
			t.Fatalf("world %d: OwesWork %v, Owes %+v", n, g.OwesWork(now, cfg), owed)
		}
		if g.OwesJobWork() != owesJob(owed) {
			t.Fatalf("world %d: OwesJobWork %v, Owes %+v", n, g.OwesJobWork(), owed)
		}
		reasons := g.Reasons(now, cfg)
		for _, o := range owed {
			if !slices.Contains(reasons, o.Reason()) {
				t.Fatalf("world %d: owed %s not among reasons %v", n, o.Reason(), reasons)
			}
		}
		if cut == len(order) && (len(owed) > 0 || !g.Obligations(now, 0, cfg).Closable()) {
			t.Fatalf("world %d, all delivered: owes %+v, %+v", n, owed, g.Obligations(now, 0, cfg))
		}
		var back Graph
		if _, err := back.DecodeState(g.AppendState(nil)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back.Owes(now, cfg), owed) {
			t.Fatalf("world %d: stored state owes %+v, want %+v", n, back.Owes(now, cfg), owed)
		}
	}
}

// owedKinds are the reason kinds Owes lists.
var owedKinds = []string{contract.ReasonMissingChildren, contract.ReasonOpenFollowup, contract.ReasonMissingDetached,
	contract.ReasonRemoteSettling, contract.ReasonRunningTurn}

// FuzzOwes checks Owes on arbitrary span sequences (malformed counts,
// cross-trace parents and links, cycles, remote spans, wakes, a close
// midway): the owed items are exactly the reasons of those kinds, sorted,
// OwesWork agrees with them, a closable invocation owes nothing, and the
// stored state owes the same.
func FuzzOwes(f *testing.F) {
	f.Add([]byte{1, 0, 1, 0, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 2, 1, 3, 5, 1, 0})
	f.Add([]byte{4, 1, 1, 3, 3, 0, 2, 0, 8, 1, 5, 6, 7, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	cfg := &GraphConfig{MaxSpans: 24, Settle: 5}
	f.Fuzz(func(t *testing.T, data []byte) {
		var g Graph
		g.Init(1)
		for i := 0; i+24 <= len(data) && i < 24*40; i += 24 {
			s := spanFromBytes(data[i : i+24])
			g.Arrive(&s, int64(2+i/24), cfg)
			if data[i]%17 == 0 && !g.IsShut {
				g.Shut()
			}
		}
		for _, now := range []int64{3, 100} {
			owed := g.Owes(now, cfg)
			if g.OwesWork(now, cfg) != (len(owed) > 0) {
				t.Fatalf("OwesWork %v, Owes %+v", g.OwesWork(now, cfg), owed)
			}
			if g.OwesJobWork() != owesJob(owed) {
				t.Fatalf("OwesJobWork %v, Owes %+v", g.OwesJobWork(), owed)
			}
			var fromOwes, fromReasons []string
			for i, o := range owed {
				fromOwes = append(fromOwes, o.Reason())
				if i > 0 && o.Kind == owed[i-1].Kind && o.Span == owed[i-1].Span && o.SpanID == owed[i-1].SpanID {
					t.Fatalf("repeated owed item %+v", o)
				}
				if o.Missing < 0 || o.Waits() == "" {
					t.Fatalf("owed item %+v", o)
				}
			}
			for _, r := range g.Reasons(now, cfg) {
				kind, _, _ := strings.Cut(r, ":")
				if slices.Contains(owedKinds, kind) {
					fromReasons = append(fromReasons, r)
				}
			}
			slices.Sort(fromOwes)
			fromOwes = slices.Compact(fromOwes)
			if !slices.Equal(fromOwes, fromReasons) {
				t.Fatalf("at %d owed %v, reasons of those kinds %v", now, fromOwes, fromReasons)
			}
			if o := g.Obligations(now, 0, cfg); o.Closable() && len(owed) > 0 {
				t.Fatalf("closable %+v but owes %+v", o, owed)
			}
			var back Graph
			if _, err := back.DecodeState(g.AppendState(nil)); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back.Owes(now, cfg), owed) {
				t.Fatalf("stored state owes %+v, want %+v", back.Owes(now, cfg), owed)
			}
		}
	})
}

// owesJob reports whether the list holds an item OwesJobWork answers for.
func owesJob(owed []Owed) bool {
	return slices.ContainsFunc(owed, func(o Owed) bool {
		return o.Kind == contract.ReasonOpenFollowup || o.Kind == contract.ReasonRunningTurn
	})
}
