package testbin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// AgentInvocation is one line of examples/shellagent's output: what the
// agent process itself counted for one invocation, to hold the collector's
// summary against.
type AgentInvocation struct {
	InvocationID            string `json:"invocation_id"`
	Scenario                string `json:"scenario"`
	SessionID               string `json:"session_id"`
	Status                  string `json:"status"`
	InputTokens             int64  `json:"input_tokens"`
	OutputTokens            int64  `json:"output_tokens"`
	CacheReadInputTokens    int64  `json:"cache_read_input_tokens"`
	ReasoningOutputTokens   int64  `json:"reasoning_output_tokens"`
	AfterResultInputTokens  int64  `json:"after_result_input_tokens"`
	AfterResultOutputTokens int64  `json:"after_result_output_tokens"`
	ModelCalls              int64  `json:"model_calls"`
	BackgroundJobs          int64  `json:"background_jobs"`
	Continuations           int64  `json:"continuations"`
	TimeToFinalMS           int64  `json:"time_to_final_ms"`
}

// ParseAgentOutput reads one JSON object per non-empty line.
func ParseAgentOutput(r io.Reader) ([]AgentInvocation, error) {
	var out []AgentInvocation
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var inv AgentInvocation
		if err := json.Unmarshal(line, &inv); err != nil {
			return nil, fmt.Errorf("testbin: agent output line %d %q: %w", n, line, err)
		}
		if inv.InvocationID == "" {
			return nil, fmt.Errorf("testbin: agent output line %d has no invocation_id: %s", n, line)
		}
		out = append(out, inv)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("testbin: agent output: %w", err)
	}
	return out, nil
}

// RunAgent runs the shellagent binary with args, feeding its stderr to
// stderr (nil discards it), and parses its stdout.
func RunAgent(ctx context.Context, bin string, stderr io.Writer, args ...string) ([]AgentInvocation, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	var errBuf bytes.Buffer
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, &errBuf)
	} else {
		cmd.Stderr = &errBuf
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("testbin: %s %s: %w\nstderr:\n%s", bin, strings.Join(args, " "), err, lastLines(errBuf.String(), 40))
	}
	return ParseAgentOutput(&stdout)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Mismatches lists every field where the collector's summary s disagrees
// with what the agent counted in process; empty means they agree.
func Mismatches(a AgentInvocation, s Summary) []string {
	var out []string
	check := func(field string, agent, summary any) {
		if agent != summary {
			out = append(out, fmt.Sprintf("%s: agent %v, summary %v", field, agent, summary))
		}
	}
	check("status", a.Status, s.Status)
	check("session", a.SessionID, s.ConversationID)
	check("input_tokens", a.InputTokens, s.InputTokens)
	check("output_tokens", a.OutputTokens, s.OutputTokens)
	check("cache_read_input_tokens", a.CacheReadInputTokens, s.CacheReadTokens)
	check("reasoning_output_tokens", a.ReasoningOutputTokens, s.ReasoningTokens)
	check("after_result_input_tokens", a.AfterResultInputTokens, s.AfterResultInputTokens)
	check("after_result_output_tokens", a.AfterResultOutputTokens, s.AfterResultOutputTokens)
	check("model_calls", a.ModelCalls, s.ModelCalls)
	check("background_jobs", a.BackgroundJobs, s.BackgroundJobs)
	check("continuations", a.Continuations, s.Continuations)
	check("time_to_final_ms", a.TimeToFinalMS, s.TimeToFinalMS)
	return out
}
