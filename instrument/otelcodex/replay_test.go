package otelcodex

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The recorded app-server output of the session scenarios (go test -run
// TestCodex -record), replayed through the event reader: it documents what
// Codex 0.169.0 does, checked on every run.

type replayed struct {
	msgs   []rpcMessage
	events []event
}

func replay(t *testing.T, name string) replayed {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r replayed
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, DefaultMaxLine)
	for sc.Scan() {
		var m rpcMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: line %q: %v", name, sc.Text(), err)
		}
		r.msgs = append(r.msgs, m)
		r.events = append(r.events, readEvent(m.Method, m.Params))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// sessionFixtures are the recorded app-server transcripts.
var sessionFixtures = []string{"session_foreground", "background_continuation", "second_prompt_meanwhile",
	"consumed_by_second_prompt", "host_continues", "close_while_running"}

func TestReplayTurnsAndCommands(t *testing.T) {
	for _, name := range sessionFixtures {
		t.Run(name, func(t *testing.T) {
			r := replay(t, name)
			started, completed := map[string]int{}, map[string]int{}
			commandTurn := map[string]string{}
			var order []string
			var total, sum tokenBreakdown
			for i, ev := range r.events {
				switch ev.kind {
				case evTurnStarted:
					started[ev.turnID] = i
					order = append(order, ev.turnID)
				case evTurnCompleted:
					completed[ev.turnID] = i
				case evItemStarted:
					if ev.item.Type == "commandExecution" {
						commandTurn[ev.item.ID] = ev.turnID
						if ev.item.ProcessID == "" {
							t.Errorf("command %s started without a process id", ev.item.ID)
						}
					}
				case evItemCompleted:
					// A command's completion is tagged with the turn that
					// started it, however late it comes.
					if ev.item.Type == "commandExecution" && commandTurn[ev.item.ID] != ev.turnID {
						t.Errorf("command %s completed in turn %s, started in %s", ev.item.ID, ev.turnID, commandTurn[ev.item.ID])
					}
				case evTokenUsage:
					l := ev.last
					sum.InputTokens += l.InputTokens
					sum.OutputTokens += l.OutputTokens
					sum.CachedInputTokens += l.CachedInputTokens
					sum.ReasoningOutputTokens += l.ReasoningOutputTokens
					var p struct {
						TokenUsage struct {
							Total tokenBreakdown `json:"total"`
						} `json:"tokenUsage"`
					}
					_ = json.Unmarshal(r.msgs[i].Params, &p)
					total = p.TokenUsage.Total
				}
			}
			// The per-request usage (last) adds up to the thread's total.
			if sum != total {
				t.Errorf("sum of last %+v, total %+v", sum, total)
			}
			for id, at := range started {
				if end, ok := completed[id]; !ok || end < at {
					t.Errorf("turn %s: started at %d, completed at %d (%v)", id, at, end, ok)
				}
			}
			if len(order) < 1 {
				t.Fatal("no turn")
			}
		})
	}
}

// TestReplayNoSelfStartedTurn: a background command that ends while the
// thread is idle makes app-server report its completion, tagged with the
// finished turn, and start no turn: the next turn starts only after a
// turn/start of the Client (its response comes first).
func TestReplayNoSelfStartedTurn(t *testing.T) {
	for _, name := range []string{"background_continuation", "host_continues"} {
		t.Run(name, func(t *testing.T) {
			r := replay(t, name)
			firstDone, cmdDone, secondStart := -1, -1, -1
			turnResponses := 0
			lastResponse := -1
			for i, ev := range r.events {
				m := r.msgs[i]
				if m.Method == "" && strings.Contains(string(m.Result), `"turn":`) {
					turnResponses++
					lastResponse = i
				}
				switch {
				case ev.kind == evTurnCompleted && firstDone < 0:
					firstDone = i
				case ev.kind == evItemCompleted && ev.item.Type == "commandExecution":
					cmdDone = i
				case ev.kind == evTurnStarted && firstDone >= 0 && secondStart < 0:
					secondStart = i
					if lastResponse < cmdDone || turnResponses != 2 {
						t.Errorf("second turn started at %d without a turn/start response after the completion (%d)", i, cmdDone)
					}
				}
			}
			if !(firstDone >= 0 && firstDone < cmdDone && cmdDone < secondStart) {
				t.Errorf("first turn done at %d, command done at %d, second turn at %d", firstDone, cmdDone, secondStart)
			}
		})
	}
}

// TestReplayCloseKills: closing stdin ends app-server and its command,
// whose completion is never reported.
func TestReplayCloseKills(t *testing.T) {
	r := replay(t, "close_while_running")
	for _, ev := range r.events {
		if ev.kind == evItemCompleted && ev.item.Type == "commandExecution" {
			t.Errorf("command %s reported completed", ev.item.ID)
		}
	}
}
