package otelcodex

import (
	"encoding/json"
	"strings"
	"testing"
)

// The recorded app-server output of the subagent scenarios (go test -run
// TestCodexSubagents -record), replayed: what Codex 0.169.0 reports of
// its subagents, checked on every run.

var subagentFixtures = []string{"subagent_waited", "subagent_outlives_turn", "subagent_nested", "subagent_second_prompt",
	"subagent_followup_task", "subagent_host_continues", "subagent_consumed"}

// subagentReplay is what a transcript says of its threads and turns.
type subagentReplay struct {
	root string
	// threadOf and rootOf are each turn's thread and rootTurnId; order
	// is the turns in start order; doneAt and startAt their positions.
	threadOf, rootOf map[string]string
	startAt, doneAt  map[string]int
	// completions are the subAgentActivity "completed" items.
	completions []subagentCompletion
}

type subagentCompletion struct {
	at                    int
	turnID, childTurn     string
	threadID, agentThread string
	agentPath             string
}

func replaySubagents(t *testing.T, name string) subagentReplay {
	t.Helper()
	r := replay(t, name)
	s := subagentReplay{threadOf: map[string]string{}, rootOf: map[string]string{}, startAt: map[string]int{}, doneAt: map[string]int{}}
	for i, m := range r.msgs {
		var p struct {
			ThreadID string `json:"threadId"`
			TurnID   string `json:"turnId"`
			Thread   struct {
				ID string `json:"id"`
			} `json:"thread"`
			Turn struct {
				ID         string `json:"id"`
				RootTurnID string `json:"rootTurnId"`
			} `json:"turn"`
			Item struct {
				Type, ID, Kind, AgentThreadID, AgentPath string
			} `json:"item"`
		}
		if m.Method == "" && s.root == "" && json.Unmarshal(m.Result, &p) == nil && p.Thread.ID != "" {
			s.root = p.Thread.ID // thread/start's response
			continue
		}
		if json.Unmarshal(m.Params, &p) != nil {
			continue
		}
		switch m.Method {
		case "turn/started":
			s.threadOf[p.Turn.ID], s.rootOf[p.Turn.ID], s.startAt[p.Turn.ID] = p.ThreadID, p.Turn.RootTurnID, i
		case "turn/completed":
			s.doneAt[p.Turn.ID] = i
		case "item/completed":
			if p.Item.Type == "subAgentActivity" && p.Item.Kind == "completed" {
				s.completions = append(s.completions, subagentCompletion{at: i, turnID: p.TurnID, threadID: p.ThreadID,
					childTurn: strings.TrimPrefix(p.Item.ID, "subagent-completed-"), agentThread: p.Item.AgentThreadID, agentPath: p.Item.AgentPath})
			}
		}
	}
	if s.root == "" {
		t.Fatalf("%s: no thread/start response", name)
	}
	return s
}

// TestReplaySubagentTurns: a subagent's turns run in a thread of their
// own whose rootTurnId is the spawning prompt's turn; its end is a
// subAgentActivity "completed" on the parent's thread, tagged with the
// spawning turn (also after that turn completed), naming the child's turn.
func TestReplaySubagentTurns(t *testing.T) {
	for _, name := range subagentFixtures {
		t.Run(name, func(t *testing.T) {
			s := replaySubagents(t, name)
			children := 0
			for turn, thread := range s.threadOf {
				if thread == s.root {
					continue
				}
				children++
				if root := s.rootOf[turn]; s.threadOf[root] != s.root {
					t.Errorf("child turn %s: rootTurnId %s is not a turn of the root thread", turn, root)
				}
			}
			// The session may close (the scenario is done) between the
			// child's turn/completed and the parent's item.
			if children == 0 || len(s.completions) > children {
				t.Fatalf("%d child turns, %d completions", children, len(s.completions))
			}
			for _, c := range s.completions {
				if s.threadOf[c.childTurn] != c.agentThread || c.agentThread == c.threadID {
					t.Errorf("completion %+v: not the child's turn", c)
				}
				if s.threadOf[c.turnID] != c.threadID || !strings.HasPrefix(c.agentPath, "/root/") {
					t.Errorf("completion %+v: not tagged with a turn of the parent's thread", c)
				}
				if done, ok := s.doneAt[c.childTurn]; !ok || done > c.at+2 {
					t.Errorf("completion %+v at %d, child turn completed at %d (%v)", c, c.at, done, ok)
				}
			}
		})
	}
}

// TestReplaySubagentNoWake: a subagent whose turn ends after its
// parent's turn starts no turn of the parent's thread: the next one (the
// continuation that reads its answer) starts only after a turn/start
// response that came after the child's turn completed; a completion
// reported meanwhile is tagged with the finished turn.
func TestReplaySubagentNoWake(t *testing.T) {
	for _, name := range []string{"subagent_outlives_turn", "subagent_host_continues", "subagent_consumed"} {
		t.Run(name, func(t *testing.T) {
			s := replaySubagents(t, name)
			r := replay(t, name)
			var responses []int
			for i, m := range r.msgs {
				if m.Method == "" && strings.Contains(string(m.Result), `"turn":`) {
					responses = append(responses, i)
				}
			}
			var rootTurns, childTurns []string
			for turn, thread := range s.threadOf {
				if thread == s.root {
					rootTurns = append(rootTurns, turn)
				} else {
					childTurns = append(childTurns, turn)
				}
			}
			if len(rootTurns) != 2 || len(childTurns) != 1 {
				t.Fatalf("root turns %v, child turns %v", rootTurns, childTurns)
			}
			first, second := rootTurns[0], rootTurns[1]
			if s.startAt[second] < s.startAt[first] {
				first, second = second, first
			}
			childDone := s.doneAt[childTurns[0]]
			if childDone < s.doneAt[first] {
				t.Errorf("child turn completed at %d, before the prompt's turn (%d)", childDone, s.doneAt[first])
			}
			asked := false
			for _, at := range responses {
				asked = asked || (at > childDone && at < s.startAt[second])
			}
			if s.startAt[second] < childDone || !asked {
				t.Errorf("second turn started at %d, child done at %d, turn/start responses at %v", s.startAt[second], childDone, responses)
			}
			for _, c := range s.completions {
				if c.turnID != first {
					t.Errorf("completion %+v not tagged with the prompt's turn %s", c, first)
				}
			}
		})
	}
}

// TestReplaySubagentCloseKills: closing stdin while a subagent works ends
// app-server without reporting the subagent's turn completed.
func TestReplaySubagentCloseKills(t *testing.T) {
	s := replaySubagents(t, "subagent_close_while_running")
	for turn, thread := range s.threadOf {
		if _, done := s.doneAt[turn]; thread != s.root && done {
			t.Errorf("child turn %s reported completed", turn)
		}
	}
	if len(s.completions) != 0 {
		t.Errorf("completions %+v", s.completions)
	}
}
