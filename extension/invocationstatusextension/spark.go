package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// Geometry of a row's mini-timeline.
const (
	sparkW = 160.0
	sparkH = 16.0
	// maxSparkBars bounds the bars of one mini-timeline: the first of
	// each kind in arrival order.
	maxSparkBars = 24
)

// sparkline is a row's mini-timeline: the invocation's lifecycle spans and
// model calls on its own axis, and the result line.
type sparkline struct {
	W, H      float64
	Bars      []sparkBar
	HasResult bool
	ResultX   float64
}

type sparkBar struct {
	X, Y, W, H float64
	Class      string
}

// sparkOf lays out v's mini-timeline at now: the root (from its times
// when it was not recorded), jobs, continuations, followup_closed markers
// and model calls, the after-result ones marked.
func sparkOf(v *statusapi.Invocation, now time.Time) sparkline {
	s := sparkline{W: sparkW, H: sparkH}
	var spans []statusapi.Span
	if v.Timeline != nil {
		spans = v.Timeline.Spans
	}
	lo, hi := v.Started, v.Started
	if v.ResultAt != nil {
		hi = later(hi, *v.ResultAt)
	}
	for _, sp := range spans {
		if sp.Start.Before(lo) {
			lo = sp.Start
		}
		hi = later(hi, sp.End)
	}
	if v.Open() {
		hi = later(hi, now)
	}
	d := hi.Sub(lo)
	if d <= 0 {
		d = time.Millisecond
	}
	x := func(t time.Time) float64 { return min(1, max(0, float64(t.Sub(lo))/float64(d))) * (sparkW - 2) }
	bar := func(a, b time.Time, y, h float64, class string) {
		s.Bars = append(s.Bars, sparkBar{X: x(a), Y: y, W: max(x(b)-x(a), 1.5), H: h, Class: class})
	}
	root := false
	for _, sp := range spans {
		if len(s.Bars) >= maxSparkBars {
			break
		}
		switch {
		case sp.Role == statusapi.RoleRoot && !root:
			root = true
			bar(sp.Start, sp.End, 1, 5, "root")
		case sp.Role == statusapi.RoleBackground:
			bar(sp.Start, sp.End, 7, 3, "background")
		case sp.Role == statusapi.RoleContinuation:
			bar(sp.Start, sp.End, 1, 5, "continuation")
		case sp.Role == statusapi.RoleFollowupClosed:
			bar(sp.Start, sp.End, 1, 5, "followup-closed")
		case sp.ModelCall:
			class := "model"
			if v.ResultAt != nil && sp.Start.After(*v.ResultAt) {
				class = "model after-result"
			}
			bar(sp.Start, sp.End, 11, 4, class)
		}
	}
	if !root && v.ResultAt != nil {
		bar(v.Started, *v.ResultAt, 1, 5, "root")
	}
	if v.ResultAt != nil {
		s.HasResult, s.ResultX = true, x(*v.ResultAt)
	}
	return s
}
