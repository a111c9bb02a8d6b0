package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// Geometry of the timeline chart, in SVG user units.
const (
	chartWidth  = 1200.0
	chartLabelW = 330.0 // the span names' column
	chartRight  = 150.0 // room right of the axis for token counts
	chartRowH   = 20.0
	chartTop    = 34.0 // the axis and its labels
	chartIndent = 12.0 // per level of parentage in the names' column
	maxIndent   = 8
	maxLabel    = 44 // runes of a span name in the names' column
)

// chart is one invocation laid out on one time axis: a lane per trace
// (the root's first, then by their first span's start), each with one row
// per recorded span in parent order; the result line and the after-result
// area; the links between spans; what an open invocation still waits on.
type chart struct {
	Width, Height float64
	AxisX, AxisW  float64
	Ticks         []chartTick
	Lanes         []chartLane
	Arrows        []chartArrow
	// ResultX is where the caller got its result; HasResult is false
	// while the root is missing.
	HasResult bool
	ResultX   float64
	// NowX marks now while the invocation is open.
	Open bool
	NowX float64
	// SettleX marks when remote subtrees stop settling (open only).
	Settling bool
	SettleX  float64
	// AfterCalls, AfterIn, AfterOut add up the drawn model calls that
	// started after the result (the summary's rule): equal to the
	// summary's after-result usage when no span was cut.
	AfterCalls        int
	AfterIn, AfterOut int64
	// Stretched: the time before the result is drawn on a larger scale
	// than the time after it (the scale changes at the result line).
	Stretched bool
	// Drawn holds the bar classes the chart draws (root, tool, model,
	// after-result, ...): the legend lists only those.
	Drawn map[string]bool
}

const (
	// chartMinBar is the narrowest bar: a span of a few milliseconds on
	// an axis of seconds stays visible.
	chartMinBar = 5.0
	// chartCharW estimates the width of one character of a note (12px
	// system-ui), to keep notes off the result line.
	chartCharW = 6.6
	// chartPreResult is the least share of the axis the time before the
	// result gets.
	chartPreResult = 0.2
)

type chartTick struct {
	X     float64
	Label string
}

// chartLane is one trace's rows.
type chartLane struct {
	TraceID string
	// Kind is the trace's part in the invocation: root, continuation,
	// followup_closed (by its top span's role), or other.
	Kind  string
	Title string
	Y     float64 // the lane header's row
	H     float64 // header and rows
	Rows  []chartRow
}

// chartRow is one span.
type chartRow struct {
	Y, TextY float64
	LabelX   float64
	Label    string
	Span     statusapi.Span
	// Class picks the bar's colour: root, background, continuation,
	// followup-closed, model, tool, span.
	Class string
	X, W  float64
	// Marker draws a zero-length lifecycle span (followup_closed) as a
	// diamond at X; Points are its corners.
	Marker bool
	Points string
	// PastResult: the span ends after the result line. AfterResult: a
	// model call that started after it (its usage is after-result).
	PastResult, AfterResult bool
	Note                    string
	NoteX                   float64
	// Wait is a dashed segment to WaitX: what this span still waits for
	// (children by its name, its followup, a remote subtree settling).
	Wait       string
	WaitX      float64
	HasWait    bool
	WaitRemote bool
}

// chartArrow joins a span to the span its link names (a continuation or
// followup_closed to its job, a consuming turn to the job it read).
type chartArrow struct {
	X1, Y1, X2, Y2 float64
	Kind           string
}

// layoutChart lays out v's recorded spans. v is as presented at now
// (ages filled in).
func layoutChart(v *statusapi.Invocation, now time.Time) chart {
	var spans []statusapi.Span
	if v.Timeline != nil {
		spans = v.Timeline.Spans
	}
	c := chart{Width: chartWidth, AxisX: chartLabelW, AxisW: chartWidth - chartLabelW - chartRight, Open: v.Open(), Drawn: map[string]bool{}}

	// The axis: every span, the result, and while open now and the
	// settle deadline.
	lo, hi := v.Started, v.Started
	if v.ResultAt != nil {
		hi = later(hi, *v.ResultAt)
	}
	for _, s := range spans {
		if s.Start.Before(lo) {
			lo = s.Start
		}
		hi = later(hi, later(s.End, s.Start))
	}
	var settleUntil time.Time
	if w := v.Waiting; c.Open && w != nil {
		hi = later(hi, now)
		if w.RemoteSettling != nil {
			settleUntil = w.RemoteSettling.Until
			hi = later(hi, settleUntil)
		}
	}
	span := hi.Sub(lo)
	if span <= 0 {
		span = time.Millisecond
	}
	x := func(t time.Time) float64 {
		f := float64(t.Sub(lo)) / float64(span)
		return c.AxisX + min(1, max(0, f))*c.AxisW
	}
	// When the result comes early on an axis that runs on long after it
	// (a background job), the time before the result gets at least
	// chartPreResult of the axis, so that the turn's own spans are
	// readable; the scale then changes at the result line, and the ticks
	// say so (one at the result, the rest spread after it).
	stretched := false
	if v.ResultAt != nil && v.ResultAt.After(lo) && hi.After(*v.ResultAt) &&
		float64(v.ResultAt.Sub(lo))/float64(span) < chartPreResult {
		stretched = true
		res := *v.ResultAt
		pre, post := res.Sub(lo), hi.Sub(res)
		x = func(t time.Time) float64 {
			if !t.After(res) {
				f := float64(t.Sub(lo)) / float64(pre)
				return c.AxisX + max(0, f)*chartPreResult*c.AxisW
			}
			f := float64(t.Sub(res)) / float64(post)
			return c.AxisX + (chartPreResult+min(1, f)*(1-chartPreResult))*c.AxisW
		}
		c.Stretched = true
		c.Ticks = append(c.Ticks, chartTick{X: x(lo), Label: "+0s"}, chartTick{X: x(res), Label: "+" + roundAge(pre)})
		for i := 1; i <= 4; i++ {
			d := pre + post*time.Duration(i)/4
			c.Ticks = append(c.Ticks, chartTick{X: x(lo.Add(d)), Label: "+" + roundAge(d)})
		}
	}
	if !stretched {
		for i := range 6 {
			d := span * time.Duration(i) / 5
			c.Ticks = append(c.Ticks, chartTick{X: x(lo.Add(d)), Label: "+" + roundAge(d)})
		}
	}
	if v.ResultAt != nil {
		c.HasResult, c.ResultX = true, x(*v.ResultAt)
	}
	if c.Open {
		c.NowX = x(now)
		if !settleUntil.IsZero() {
			c.Settling, c.SettleX = true, x(settleUntil)
		}
	}

	// Lanes by trace: the root's first, then by their first span.
	byTrace := map[statusapi.TraceID][]int{}
	var order []statusapi.TraceID
	for i, s := range spans {
		if _, ok := byTrace[s.TraceID]; !ok {
			order = append(order, s.TraceID)
		}
		byTrace[s.TraceID] = append(byTrace[s.TraceID], i)
	}
	rootTrace, hasRoot := rootTraceOf(v, spans)
	first := func(t statusapi.TraceID) time.Time {
		m := spans[byTrace[t][0]].Start
		for _, i := range byTrace[t] {
			if spans[i].Start.Before(m) {
				m = spans[i].Start
			}
		}
		return m
	}
	slices.SortStableFunc(order, func(a, b statusapi.TraceID) int {
		if hasRoot && (a == rootTrace) != (b == rootTrace) {
			if a == rootTrace {
				return -1
			}
			return 1
		}
		if n := first(a).Compare(first(b)); n != 0 {
			return n
		}
		return strings.Compare(a.String(), b.String())
	})

	waits := waitsOf(v)
	y := chartTop
	rowY := map[statusapi.SpanID]float64{}
	ends := map[statusapi.SpanID]float64{}
	for _, t := range order {
		lane := chartLane{TraceID: t.String(), Y: y}
		y += chartRowH
		for _, e := range parentOrder(spans, byTrace[t]) {
			s := spans[e.index]
			r := chartRow{
				Y: y, TextY: y + chartRowH*0.7, LabelX: 6 + float64(min(e.depth, maxIndent))*chartIndent,
				Label: cutLabel(s.Name), Span: s, Class: classOf(s),
				X: x(s.Start), PastResult: v.ResultAt != nil && s.End.After(*v.ResultAt),
			}
			r.W = max(x(s.End)-r.X, chartMinBar)
			if c.HasResult && !r.PastResult && r.X < c.ResultX {
				// A span that ended before the result keeps to its side
				// of the line, however short.
				r.W = max(min(r.W, c.ResultX-r.X), 1.5)
			}
			if s.Role == statusapi.RoleFollowupClosed || s.End.Equal(s.Start) && s.Role != "" {
				r.Marker = true
				cy := y + chartRowH/2
				r.Points = fmt.Sprintf("%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f", r.X, cy-6, r.X+6, cy, r.X, cy+6, r.X-6, cy)
			}
			if s.ModelCall {
				r.Note = fmt.Sprintf("%s in · %s out", groupDigits(s.InputTokens), groupDigits(s.OutputTokens))
				if v.ResultAt != nil && s.Start.After(*v.ResultAt) {
					r.AfterResult = true
					c.AfterCalls++
					c.AfterIn += s.InputTokens
					c.AfterOut += s.OutputTokens
				}
			}
			if w, ok := waits.of(s, now); ok {
				r.HasWait, r.Wait, r.WaitRemote = true, w.text, w.remote
				r.WaitX = x(w.until)
				if w.until.IsZero() {
					r.WaitX = c.NowX
				}
			}
			r.NoteX = max(r.X+r.W, r.WaitX) + 6
			if r.Marker {
				r.NoteX = r.X + 10
			}
			// A note that would run across the result line starts just
			// after it instead, so that the line does not strike it out.
			if text := r.Note + r.Wait; c.HasResult && text != "" && r.NoteX < c.ResultX &&
				r.NoteX+float64(len([]rune(text)))*chartCharW > c.ResultX-2 {
				r.NoteX = c.ResultX + 6
			}
			c.Drawn[r.Class] = true
			if r.AfterResult {
				c.Drawn["after-result"] = true
			}
			rowY[s.SpanID] = y + chartRowH/2
			ends[s.SpanID] = r.X + r.W
			lane.Rows = append(lane.Rows, r)
			y += chartRowH
		}
		lane.Kind, lane.Title = laneKind(t, lane.Rows, hasRoot && t == rootTrace)
		lane.H = y - lane.Y
		c.Lanes = append(c.Lanes, lane)
		y += chartRowH / 2
	}
	for _, lane := range c.Lanes {
		for _, r := range lane.Rows {
			s := r.Span
			ty, ok := rowY[s.LinkedSpanID]
			if s.Link == "" || !ok {
				continue
			}
			c.Arrows = append(c.Arrows, chartArrow{X1: ends[s.LinkedSpanID], Y1: ty, X2: r.X, Y2: r.Y + chartRowH/2, Kind: string(s.Link)})
		}
	}
	c.Height = y + chartRowH
	return c
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// rootTraceOf is the root span's trace, else the view's first.
func rootTraceOf(v *statusapi.Invocation, spans []statusapi.Span) (statusapi.TraceID, bool) {
	for _, s := range spans {
		if s.Role == statusapi.RoleRoot {
			return s.TraceID, true
		}
	}
	var t statusapi.TraceID
	if len(v.TraceIDs) > 0 && t.UnmarshalText([]byte(v.TraceIDs[0])) == nil {
		return t, true
	}
	return t, false
}

func laneKind(t statusapi.TraceID, rows []chartRow, isRoot bool) (kind, title string) {
	id := t.String()[:16] + "…" // the lane's data-trace-id and tooltip hold it whole
	switch {
	case isRoot:
		return "root", "root trace " + id
	case len(rows) > 0 && rows[0].Span.Role == statusapi.RoleContinuation:
		return "continuation", "continuation trace " + id
	case len(rows) > 0 && rows[0].Span.Role == statusapi.RoleFollowupClosed:
		return "followup_closed", "followup_closed trace " + id
	}
	return "other", "trace " + id
}

func classOf(s statusapi.Span) string {
	switch s.Role {
	case statusapi.RoleRoot:
		return "root"
	case statusapi.RoleBackground:
		return "background"
	case statusapi.RoleContinuation:
		return "continuation"
	case statusapi.RoleFollowupClosed:
		return "followup-closed"
	}
	switch {
	case s.ModelCall:
		return "model"
	case strings.HasPrefix(s.Name, "execute_tool"):
		return "tool"
	}
	return "span"
}

func cutLabel(name string) string {
	r := []rune(name)
	if len(r) <= maxLabel {
		return name
	}
	return string(r[:maxLabel-1]) + "…"
}

// ordered is a span's index and depth in parent order.
type ordered struct {
	index, depth int
}

// parentOrder lists one trace's spans depth first: each span after its
// parent, siblings by start; a span whose parent is not recorded starts
// a tree of its own. A parent cycle (the ledger reports it) is cut where
// it closes.
func parentOrder(spans []statusapi.Span, idx []int) []ordered {
	in := map[statusapi.SpanID]bool{}
	for _, i := range idx {
		in[spans[i].SpanID] = true
	}
	children := map[statusapi.SpanID][]int{}
	var tops []int
	for _, i := range idx {
		p := spans[i].ParentSpanID
		if p.IsZero() || !in[p] || p == spans[i].SpanID {
			tops = append(tops, i)
			continue
		}
		children[p] = append(children[p], i)
	}
	byStart := func(a, b int) int {
		if n := spans[a].Start.Compare(spans[b].Start); n != 0 {
			return n
		}
		return cmp.Compare(a, b)
	}
	slices.SortFunc(tops, byStart)
	out := make([]ordered, 0, len(idx))
	seen := map[int]bool{}
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if seen[i] {
			return
		}
		seen[i] = true
		out = append(out, ordered{index: i, depth: depth})
		kids := children[spans[i].SpanID]
		slices.SortFunc(kids, byStart)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, i := range tops {
		walk(i, 0)
	}
	// Spans only on a cycle are reached from no top: list them flat.
	for _, i := range idx {
		if !seen[i] {
			walk(i, 0)
		}
	}
	return out
}

// waitIndex finds what an open invocation waits on for each span: the
// parents by name that miss children, the jobs by span ID whose followup
// is expected, the remote spans by name while they settle.
type waitIndex struct {
	children  map[string]statusapi.MissingChildren
	followups map[string]statusapi.ExpectedFollowup
	remote    map[string]bool
	until     time.Time
}

type spanWait struct {
	text   string
	until  time.Time // zero: now
	remote bool
}

func waitsOf(v *statusapi.Invocation) waitIndex {
	w := waitIndex{children: map[string]statusapi.MissingChildren{}, followups: map[string]statusapi.ExpectedFollowup{}, remote: map[string]bool{}}
	if !v.Open() || v.Waiting == nil {
		return w
	}
	for _, m := range v.Waiting.MissingChildren {
		w.children[m.Parent] = m
	}
	for _, f := range v.Waiting.ExpectedFollowups {
		w.followups[f.SpanID] = f
	}
	if rs := v.Waiting.RemoteSettling; rs != nil {
		for _, n := range rs.Spans {
			w.remote[n] = true
		}
		w.until = rs.Until
	}
	return w
}

func (w waitIndex) of(s statusapi.Span, now time.Time) (spanWait, bool) {
	if f, ok := w.followups[s.SpanID.String()]; ok {
		return spanWait{text: fmt.Sprintf("awaits %d followup(s), job started %s ago", f.Missing, roundAge(now.Sub(f.Started)))}, true
	}
	if m, ok := w.children[s.Name]; ok {
		return spanWait{text: fmt.Sprintf("%d child span(s) missing under %d span(s) of this name", m.Missing, m.Parents)}, true
	}
	if s.Remote && w.remote[s.Name] {
		return spanWait{text: "remote subtree settling until " + w.until.Format("15:04:05.000"), until: w.until, remote: true}, true
	}
	return spanWait{}, false
}
