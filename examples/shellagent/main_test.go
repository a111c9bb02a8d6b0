package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
)

// want is an invocation's expected final line (ids and time left out).
type want struct {
	in, out, arIn, arOut, calls, jobs, conts int64
}

func (w want) matches(l line) bool {
	return l.Status == contract.StatusFinal && l.InputTokens == w.in && l.OutputTokens == w.out &&
		l.AfterResultInputTokens == w.arIn && l.AfterResultOutputTokens == w.arOut &&
		l.ModelCalls == w.calls && l.BackgroundJobs == w.jobs && l.Continuations == w.conts
}

var (
	fgWant  = want{in: 30, out: 6, calls: 3}
	bgWant  = want{in: 40, out: 8, arIn: 10, arOut: 2, calls: 4, jobs: 1, conts: 1}
	quietBg = want{in: 30, out: 6, calls: 3, jobs: 1} // job ended, no continuation
	noTitle = want{in: 20, out: 4, calls: 2}          // a later prompt on a titled session
)

type testApp struct {
	*app
	exp *tracetest.InMemoryExporter
}

func newTestApp(t *testing.T) *testApp {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	cfg := config{timeout: time.Minute, remoteSettle: 0, exporter: exp}
	a, err := newApp(context.Background(), cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.close(context.Background()) })
	return &testApp{app: a, exp: exp}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// runOne runs a scenario, waits for its invocations and the runtime, and
// returns its lines.
func (a *testApp) runOne(t *testing.T, name string) []line {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	served := len(a.model.Requests())
	invs, err := a.runScenarios(ctx, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := a.summaries(ctx, invs)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.rt.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing is counted twice: every model request is one model call of
	// exactly one invocation.
	var calls int64
	for _, l := range a.linesAgain(t, invs) {
		calls += l.ModelCalls
	}
	if got := int64(len(a.model.Requests()) - served); got != calls {
		t.Errorf("model served %d requests, invocations count %d model calls", got, calls)
	}
	return lines
}

// linesAgain re-reads the summaries after all background work ended, to
// see that nothing changed after final.
func (a *testApp) linesAgain(t *testing.T, invs []started) []line {
	t.Helper()
	var out []line
	for _, inv := range invs {
		s, ok := a.ledger.Summary(inv.invocation)
		if !ok {
			t.Fatalf("ledger forgot %s", inv.invocation)
		}
		if s.Revision != 1 {
			t.Errorf("invocation %s revised after final: %+v", inv.invocation, s)
		}
		out = append(out, lineOf(inv.scenario, inv.session, s))
	}
	return out
}

func TestScenarios(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []want
	}{
		{"foreground", []want{fgWant}},
		{"background", []want{bgWant}},
		{"warm-second", []want{bgWant, noTitle}},
		{"consumed", []want{quietBg, noTitle}},
		{"interrupt-queued", []want{quietBg, noTitle}},
		{"long-background", []want{bgWant}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestApp(t)
			lines := a.runOne(t, tc.name)
			if len(lines) != len(tc.want) {
				t.Fatalf("got %d invocations, want %d: %+v", len(lines), len(tc.want), lines)
			}
			for i, w := range tc.want {
				if !w.matches(lines[i]) {
					t.Errorf("invocation %d = %+v, want %+v", i, lines[i], w)
				}
			}
		})
	}
}

func TestInterruptQueuedSpans(t *testing.T) {
	a := newTestApp(t)
	lines := a.runOne(t, "interrupt-queued")
	var closed int
	for _, s := range a.exp.GetSpans() {
		if s.Name == contract.SpanNameFollowupClosed {
			closed++
			if got := attr(s, contract.AttrFollowupReason); got != contract.ReasonInterrupted {
				t.Errorf("followup reason %q", got)
			}
			if got := attr(s, contract.AttrInvocationID); got != lines[0].InvocationID {
				t.Errorf("followup_closed of %q, want %s", got, lines[0].InvocationID)
			}
		}
		if len(s.Links) > 0 && s.Name != contract.SpanNameFollowupClosed {
			t.Errorf("span %q has links %v; nobody read the notification", s.Name, s.Links)
		}
	}
	if closed != 1 {
		t.Errorf("followup_closed spans %d, want 1", closed)
	}
}

func TestConsumedSpans(t *testing.T) {
	a := newTestApp(t)
	lines := a.runOne(t, "consumed")
	var closed, consumedLinks int
	for _, s := range a.exp.GetSpans() {
		if s.Name == contract.SpanNameFollowupClosed {
			closed++
			if got := attr(s, contract.AttrFollowupReason); got != contract.ReasonConsumedBy {
				t.Errorf("followup reason %q", got)
			}
			if got := attr(s, contract.AttrFollowupConsumer); got != lines[1].InvocationID {
				t.Errorf("consumer %q, want %s", got, lines[1].InvocationID)
			}
			if got := attr(s, contract.AttrInvocationID); got != lines[0].InvocationID {
				t.Errorf("followup_closed of %q, want %s", got, lines[0].InvocationID)
			}
		}
		for _, l := range s.Links {
			for _, kv := range l.Attributes {
				if string(kv.Key) == contract.AttrLink && kv.Value.AsString() == contract.LinkConsumed {
					consumedLinks++
					if attr(s, contract.AttrInvocationID) != lines[1].InvocationID {
						t.Errorf("consumed link on span %q of another invocation", s.Name)
					}
				}
			}
		}
	}
	if closed != 1 || consumedLinks != 1 {
		t.Errorf("followup_closed spans %d, consumed links %d; want 1 and 1", closed, consumedLinks)
	}
}

// TestInterruptRace runs the race several times: whichever side wins, the
// invocation is final with the usage of the turns that ran.
func TestInterruptRace(t *testing.T) {
	a := newTestApp(t)
	for i := 0; i < 4; i++ {
		lines := a.runOne(t, "interrupt-race")
		if len(lines) != 1 {
			t.Fatalf("lines %+v", lines)
		}
		if !quietBg.matches(lines[0]) && !bgWant.matches(lines[0]) {
			t.Errorf("run %d: %+v is neither %+v nor %+v", i, lines[0], quietBg, bgWant)
		}
	}
	var closed int
	for _, s := range a.exp.GetSpans() {
		if s.Name == contract.SpanNameFollowupClosed {
			closed++
			if got := attr(s, contract.AttrFollowupReason); got != contract.ReasonInterrupted {
				t.Errorf("followup reason %q", got)
			}
		}
	}
	t.Logf("followups closed as interrupted: %d of 4", closed)
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}

// TestGoRunBackground runs the command as a user would.
func TestGoRunBackground(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	cmd := exec.Command("go", "run", ".", "-scenario", "background")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, stderr.String())
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l line
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil && err != io.EOF {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 1 || !bgWant.matches(lines[0]) || lines[0].Scenario != "background" {
		t.Fatalf("stdout = %s", out)
	}
	for _, s := range []string{`"status":"final"`, `"input_tokens":40`, `"output_tokens":8`,
		`"after_result_input_tokens":10`, `"after_result_output_tokens":2`} {
		if !bytes.Contains(out, []byte(s)) {
			t.Errorf("stdout lacks %s: %s", s, out)
		}
	}
}
