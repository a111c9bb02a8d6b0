package instrument

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSessionOwesProperty drives random sessions through jobs,
// continuations, interrupted followups, invocations that stay open (so
// WithMaxOpenInvocations evicts), and clock advances past the retention
// and, in one configuration, the open timeout; after every step each
// session whose ground truth holds work must owe work: a job running, a
// continuation running, or (while no open timeout can pass) an ended
// job's followup not yet delivered. Eviction, the retention and its bound
// never make a session owe less (issue 33, observation 5).
func TestSessionOwesProperty(t *testing.T) {
	for _, c := range []struct {
		name        string
		openTimeout time.Duration
		// followupsOwed: the open timeout cannot pass, so an expected
		// followup is owed work too (a timeout may write it off).
		followupsOwed bool
	}{{"no timeout", 24 * time.Hour, true}, {"open timeout", 3 * time.Minute, false}} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 33))
			for run := range 60 {
				sessionOwesRun(t, r, run, c.openTimeout, c.followupsOwed)
			}
		})
	}
}

type propJob struct {
	session string
	job     *Job
	ended   bool // ended with a followup owed
	done    bool // followup delivered or closed
}

func sessionOwesRun(t *testing.T, r *rand.Rand, run int, openTimeout time.Duration, followupsOwed bool) {
	p := newPipelineWith(t, []SpanProcessorOption{
		WithMaxOpenInvocations(2), WithRetention(time.Minute), WithOpenTimeout(openTimeout),
	})
	l := p.sp.Ledger()
	sessions := []string{"s0", "s1", "s2", "s3"}
	var jobs []*propJob
	var conts []*Continuation
	contSession := map[*Continuation]string{}
	var held []*Invocation
	defer func() {
		for _, inv := range held {
			inv.End()
		}
	}()
	var log []string
	for step := range 80 {
		switch op := r.IntN(9); op {
		case 0, 1: // a turn that launches a job
			s := sessions[r.IntN(len(sessions))]
			ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", s)
			tctx, tool := p.tool(ctx)
			_, job := p.tracker.StartBackground(tctx, "shell")
			tool.End()
			inv.End()
			jobs = append(jobs, &propJob{session: s, job: job})
			log = append(log, fmt.Sprintf("job %s", s))
		case 2: // an invocation that stays open (evicts older ones)
			_, inv := p.tracker.StartInvocation(context.Background(), "coder", "other")
			held = append(held, inv)
			log = append(log, "open other")
		case 3: // a job ends
			if j := pick(r, jobs, func(j *propJob) bool { return !j.ended && !j.done }); j != nil {
				if r.IntN(4) == 0 {
					j.job.EndWithoutFollowup(nil)
					j.done = true
				} else {
					j.job.EndWithFollowup(nil)
				}
				j.ended = true
				log = append(log, "end job "+j.session)
			}
		case 4: // its notification starts a continuation
			if j := pick(r, jobs, func(j *propJob) bool { return j.ended && !j.done }); j != nil {
				_, cont, err := p.tracker.StartContinuation(context.Background(), "coder", j.session, j.job.Carrier())
				if err != nil {
					t.Fatal(err)
				}
				j.done = true
				conts = append(conts, cont)
				contSession[cont] = j.session
				log = append(log, "continue "+j.session)
			}
		case 5: // a continuation ends
			if len(conts) > 0 {
				i := r.IntN(len(conts))
				conts[i].End()
				log = append(log, "end continuation "+contSession[conts[i]])
				conts = append(conts[:i], conts[i+1:]...)
			}
		case 6: // the followup is closed: the job was interrupted
			if j := pick(r, jobs, func(j *propJob) bool { return j.ended && !j.done }); j != nil {
				if err := p.tracker.CloseFollowup(context.Background(), j.job.Carrier(), FollowupInterrupted, ""); err != nil {
					t.Fatal(err)
				}
				j.done = true
				log = append(log, "interrupted "+j.session)
			}
		default: // time passes: retention, open timeout
			d := time.Duration(r.IntN(150)) * time.Second
			p.clock.Advance(d)
			log = append(log, "advance "+d.String())
		}
		for _, s := range sessions {
			truth := ""
			for _, j := range jobs {
				switch {
				case j.session != s:
				case !j.ended:
					truth = "a job runs"
				case !j.done && followupsOwed:
					truth = "a followup is expected"
				}
			}
			for _, c := range conts {
				if contSession[c] == s {
					truth = "a continuation runs"
				}
			}
			if st := l.Session(s); truth != "" && !st.OwesWork {
				t.Fatalf("run %d step %d: session %s owes nothing while %s: %+v\nsteps: %v", run, step, s, truth, st, log)
			}
		}
	}
	for _, c := range conts {
		c.End()
	}
	for _, j := range jobs {
		if !j.ended {
			j.job.EndWithoutFollowup(nil)
		}
	}
}

func pick[T any](r *rand.Rand, xs []*T, ok func(*T) bool) *T {
	var cands []*T
	for _, x := range xs {
		if ok(x) {
			cands = append(cands, x)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[r.IntN(len(cands))]
}
