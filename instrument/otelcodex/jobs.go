package otelcodex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// job is a background command: an exec_command whose result said the
// process runs on ("Process running with session ID N"). Its background
// span runs until app-server reports the command completed (or a
// write_stdin read its exit, or Codex exited).
type job struct {
	callID, session, command string
	j                        *instrument.Job
	carrier                  instrument.Carrier
	ended, settled           bool
	exitCode                 *int64
	// seq orders the jobs by start.
	seq int
	// agent is a subagent turn's task name (subagent.go); its callID is
	// then the Client's key "subagent-N".
	agent string
}

// Completion is a background command that ended and whose exit no turn has
// read: it owes its invocation the turn that reads it.
type Completion struct {
	// InvocationID is the invocation whose turn launched the command.
	InvocationID string
	// CallID is the exec_command call's id (app-server's item id).
	CallID string
	// ProcessID is the unified-exec session id the model reads the
	// command's output with (write_stdin's session_id).
	ProcessID string
	// Command is the command line the model asked for.
	Command string
	// ExitCode is the command's exit code, when app-server reported one.
	ExitCode *int64
	// Agent is set for a subagent's turn that ended (its task name, e.g.
	// "/root/task_1"): its answer waits in the parent's mailbox, which
	// wait_agent reads. CallID is then the Client's key of the turn, and
	// ProcessID, Command and ExitCode are empty.
	Agent string
}

// DefaultContinueText is the prompt of a continuation the Session starts
// for a completion: it tells the model which process to read, or which
// subagent's answer.
func DefaultContinueText(c Completion) string {
	if c.Agent != "" {
		return fmt.Sprintf("The subagent %s has finished. Read its answer with wait_agent and report the result.", c.Agent)
	}
	code := "unknown"
	if c.ExitCode != nil {
		code = fmt.Sprint(*c.ExitCode)
	}
	return fmt.Sprintf("The background command %q (session ID %s) has finished with exit code %s. Read its output with write_stdin (session_id %s) and report the result.",
		c.Command, c.ProcessID, code, c.ProcessID)
}

func (j *job) completion() Completion {
	return Completion{InvocationID: j.j.InvocationID(), CallID: j.callID, ProcessID: j.session, Command: j.command, ExitCode: j.exitCode, Agent: j.agent}
}

// startJob starts the background span of the command whose exec_command
// result (tool span tctx, still open) said it runs as session. It is
// called with mu held.
func (m *mapper) startJob(tctx context.Context, o toolOutput, session string) {
	if _, ok := m.jobs[o.callID]; ok {
		return
	}
	var args struct {
		Cmd string `json:"cmd"`
	}
	_ = json.Unmarshal([]byte(o.args), &args)
	_, j := m.tracker.StartBackground(tctx, "shell", trace.WithAttributes(
		attribute.String(AttrProcessID, session),
		attribute.String(AttrCommand, args.Cmd),
	))
	m.jobSeq++
	jb := &job{callID: o.callID, session: session, command: args.Cmd, j: j, carrier: j.Carrier(), seq: m.jobSeq}
	m.jobs[o.callID] = jb
	m.bySession[session] = jb
	if it, ok := m.endedEarly[o.callID]; ok {
		delete(m.endedEarly, o.callID)
		m.commandEnded(it)
	}
}

// jobOrder returns the jobs in the order they started.
func (m *mapper) jobOrder() []*job {
	out := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *job) int { return a.seq - b.seq })
	return out
}

// commandEnded handles app-server's item/completed of a commandExecution.
// A command not known as a job yet may be one whose result the proxy has
// not seen: it is remembered (bounded) for startJob.
func (m *mapper) commandEnded(it threadItem) {
	j, ok := m.jobs[it.ID]
	if !ok {
		if _, seen := m.results[it.ID]; seen {
			return // a foreground command: its result said it exited
		}
		if _, dup := m.endedEarly[it.ID]; !dup {
			m.earlyOrder = append(m.earlyOrder, it.ID)
			if len(m.earlyOrder) > wireproxy.DefaultMaxTools {
				delete(m.endedEarly, m.earlyOrder[0])
				m.earlyOrder = m.earlyOrder[1:]
			}
		}
		m.endedEarly[it.ID] = it
		return
	}
	var err error
	if it.Status != "completed" {
		err = errors.New("codex: command " + it.Status)
	}
	m.endJob(j, it.Status, it.ExitCode, err)
}

// endJob ends the job's span once; a job whose exit no turn has read yet
// is pending: it owes a continuation. Every background command's exit can
// be read (write_stdin), so the job promises one followup.
func (m *mapper) endJob(j *job, status string, code *int64, err error) {
	if j.ended {
		return
	}
	j.ended = true
	if code != nil {
		j.exitCode = code
		j.j.Span().SetAttributes(attribute.Int64(AttrExitCode, *code))
	}
	if status != "" {
		j.j.Span().SetAttributes(attribute.String("codex.command.status", status))
	}
	j.j.EndWithFollowup(err)
	if !j.settled && !m.exited {
		m.pending = append(m.pending, j)
		m.completions = append(m.completions, j.completion())
		m.signal()
	}
	m.forget(j)
}

// collected records that the turn running in ctx read the exit of job's
// command (write_stdin): the job ends, and its followup is discharged by
// that turn when it is the job's invocation's, else closed consumed_by
// that turn's invocation.
func (m *mapper) collected(j *job, ctx context.Context, code int) {
	if !j.ended {
		c := int64(code)
		m.endJob(j, "completed", &c, nil)
	}
	m.settle(j, func() { _ = m.tracker.ConsumeFollowup(ctx, j.carrier) })
}

// settle marks the job's followup settled by do, once.
func (m *mapper) settle(j *job, do func()) {
	if j.settled {
		return
	}
	j.settled = true
	for i, p := range m.pending {
		if p == j {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			break
		}
	}
	do()
	m.forget(j)
}

// forget drops a job that ended and is settled: nothing can change it now.
func (m *mapper) forget(j *job) {
	if !j.ended || !j.settled {
		return
	}
	delete(m.jobs, j.callID)
	if m.bySession[j.session] == j {
		delete(m.bySession, j.session)
	}
}

// takeCompletions returns the completions the host is yet to be told of.
func (m *mapper) takeCompletions() []Completion {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.completions
	m.completions = nil
	return out
}

// nextContinuation returns the pending jobs the next continuation follows
// up: those of the oldest pending job's invocation; or of the job of
// callID only, when set. None when nothing is pending (or callID is not).
func (m *mapper) nextContinuation(callID string) []*job {
	var out []*job
	for _, j := range m.pending {
		switch {
		case callID != "":
			if j.callID == callID {
				return []*job{j}
			}
		case len(out) == 0 || j.j.InvocationID() == out[0].j.InvocationID():
			out = append(out, j)
		}
	}
	return out
}

// startContinuation starts the continuation that follows up jobs (of one
// invocation): its span, whose followup links discharge them. It is
// called with mu held.
func (m *mapper) startContinuation(jobs []*job) (context.Context, *instrument.Continuation, error) {
	carriers := make([]instrument.Carrier, len(jobs))
	for i, j := range jobs {
		carriers[i] = j.carrier
	}
	ctx, cont, err := m.tracker.StartContinuation(context.Background(), m.agent, m.session, carriers...)
	if err != nil {
		return nil, nil, err
	}
	cont.Span().SetAttributes(providerAttr)
	for _, j := range jobs {
		m.settle(j, func() {})
	}
	return ctx, cont, nil
}
