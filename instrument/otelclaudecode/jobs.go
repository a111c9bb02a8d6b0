package otelclaudecode

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// job is a background task (a Bash command run with run_in_background, a
// background subagent): a background span from task_started until the
// task's end, whose notification the CLI posts into the session.
type job struct {
	taskID, runID string
	// j is nil for a notification of a task this mapper never saw start;
	// ctx is the context of its background span (a subagent's model calls
	// start in it).
	j       *instrument.Job
	ctx     context.Context
	carrier instrument.Carrier
	ended   bool
	// notified is set once the CLI posted the task's notification.
	notified bool
	// settled is set once the followup is discharged (a continuation, a
	// consuming turn) or closed.
	settled bool
}

func (m *mapper) taskStarted(t task) {
	if t.ID == "" {
		return
	}
	if !t.Backgrounded {
		m.foreground[t.ID] = t
	} else {
		m.startJob(t)
	}
	m.seenLate(t.ID)
}

// seenLate handles a task that starts after a request already named it
// (its subagent's request, its notification) and was made unattributed
// for want of it: that request may have been the task's invocation's,
// which is kept from final.
func (m *mapper) seenLate(id string) {
	if _, ok := m.unknownTasks[id]; !ok {
		return
	}
	delete(m.unknownTasks, id)
	if ctx := m.subagentCtx(id); ctx != nil {
		m.taint(ctx, "request named the task before it started")
	}
}

// startJob starts the background span of a task, as a child of the tool
// use that launched it. When that span has ended (contract rule 6) the job
// is parented on the turn the tool ran in, with a launched_by link.
func (m *mapper) startJob(t task) {
	if _, ok := m.jobs[t.ID]; ok {
		return
	}
	tl, ok := m.tools[t.ToolUseID]
	if !ok {
		// Nobody launched it that we know of: its notification will be a
		// notification of an unknown task.
		return
	}
	ctx := tl.ctx
	opts := []trace.SpanStartOption{trace.WithAttributes(
		attribute.String(AttrTaskID, t.ID),
		attribute.String(AttrTaskRunID, t.RunID),
		attribute.String(contract.AttrToolCallID, t.ToolUseID),
	)}
	if tl.ended {
		ctx = tl.turnCtx
		opts = append(opts, trace.WithLinks(trace.Link{
			SpanContext: tl.span.SpanContext(),
			Attributes:  []attribute.KeyValue{attribute.String(contract.AttrLink, contract.LinkLaunchedBy)},
		}))
	}
	jctx, j := m.tracker.StartBackground(ctx, jobKind(t.Type), opts...)
	jb := &job{taskID: t.ID, runID: t.RunID, j: j, ctx: jctx, carrier: j.Carrier()}
	m.jobs[t.ID] = jb
	if t.RunID != "" {
		m.runs[t.RunID] = jb
	}
}

func (m *mapper) taskUpdated(t task) {
	if fg, ok := m.foreground[t.ID]; ok && t.Backgrounded {
		// A foreground command moved to the background.
		delete(m.foreground, t.ID)
		fg.Backgrounded = true
		m.startJob(fg)
	}
	if j, ok := m.jobs[t.ID]; ok && t.Status != "" {
		m.endJob(j, t.Status, nil)
	}
}

// taskNotification handles the notification the CLI posts when a task
// ends: a background task's job ends and its notification waits for the
// turn that reads it.
func (m *mapper) taskNotification(t task) {
	j, ok := m.jobs[t.ID]
	if !ok {
		if _, fg := m.foreground[t.ID]; fg {
			delete(m.foreground, t.ID)
			return
		}
		if tl, known := m.tools[t.ToolUseID]; known && tl != nil {
			return // a foreground tool's task: its result answers it
		}
		m.pending = append(m.pending, &job{taskID: t.ID, runID: t.RunID, notified: true})
		return
	}
	m.endJob(j, t.Status, nil)
	if !j.notified {
		j.notified = true
		if !j.settled {
			m.pending = append(m.pending, j)
		}
	}
}

// endJob ends the job's span once; status is the task's final status and
// cause, when set, why it ended without one. The CLI posts a notification
// for every task that ends while it runs, so the job promises one
// followup.
func (m *mapper) endJob(j *job, status string, cause error) {
	if j.ended {
		return
	}
	j.ended = true
	err := cause
	if status != "" {
		j.j.Span().SetAttributes(attribute.String(AttrTaskStatus, status))
		if status != "completed" {
			err = errors.New("claude code: task " + status)
		}
	}
	j.j.EndWithFollowup(err)
}

// replayedNotification handles the CLI's replay of a notification it put
// into a request of the running turn: the task has ended. Who read it is
// what that request carries (the proxy's attribution).
func (m *mapper) replayedNotification(runID string) {
	j, ok := m.runs[runID]
	if !ok || j.settled {
		return
	}
	if !j.ended {
		m.endJob(j, "completed", nil)
	}
	if !j.notified {
		j.notified = true
		m.pending = append(m.pending, j)
	}
}

func (m *mapper) dropPending(j *job) {
	for i, p := range m.pending {
		if p == j {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			return
		}
	}
}

// emptyWake handles a result for a notification when no turn ran and no
// request delivered it: the CLI answered it without a model request.
// While other notifications wait it is left pending, since the CLI then
// reads them all in its next request; alone, its turn is a continuation
// without model calls.
func (m *mapper) emptyWake(runID string) {
	j, ok := m.runs[runID]
	if !ok || j.settled || j.j == nil || len(m.pending) != 1 || m.pending[0] != j || m.calls > 0 {
		return
	}
	if _, ok := m.continuation([]*job{j}); ok {
		m.switchTurn(nil)
	}
}
