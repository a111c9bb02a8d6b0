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
	// parentTask is the task id of the subagent that launched the job,
	// "" for a job of the session's own turns.
	parentTask string
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
	} else if !m.rerun(t) {
		m.startJob(t)
	}
	m.seenLate(t.ID)
}

// rerun handles a background subagent the CLI runs again under the same
// task id (a new run id) to read the notifications of the jobs its earlier
// run launched (Claude Code 2.1.328: its own background shell ended after
// the subagent's run did). The notifications that woke it are the
// evidence: the rerun is a continuation of their jobs' invocation, which
// discharges their followups, and in it a new background job for the run,
// whose own notification the session reads later. It reports false when
// t is no rerun or nothing of ours woke it (startJob then decides).
func (m *mapper) rerun(t task) bool {
	if old, ok := m.jobs[t.ID]; ok && (!old.ended || old.runID == t.RunID) {
		return false
	}
	var woke []*job
	for _, j := range m.pending {
		if j.parentTask == t.ID && j.j != nil && !j.settled {
			woke = append(woke, j)
		}
	}
	if len(woke) == 0 {
		return false
	}
	inv := woke[0].j.InvocationID()
	var carriers []instrument.Carrier
	for _, j := range woke {
		if j.j.InvocationID() == inv {
			carriers = append(carriers, j.carrier)
		}
	}
	ctx, cont, err := m.tracker.StartContinuation(context.Background(), m.agent, m.session, carriers...)
	if err != nil {
		return false
	}
	cont.Span().SetAttributes(providerAttr)
	for _, j := range woke {
		m.dropPending(j)
		j.settled = true
		if j.j.InvocationID() != inv {
			_ = m.tracker.ConsumeFollowup(ctx, j.carrier)
		}
	}
	jctx, j := m.tracker.StartBackground(ctx, jobKind(t.Type), trace.WithAttributes(
		attribute.String(AttrTaskID, t.ID),
		attribute.String(AttrTaskRunID, t.RunID),
		attribute.String(contract.AttrToolCallID, t.ToolUseID),
	))
	m.addJob(&job{taskID: t.ID, runID: t.RunID, parentTask: t.ParentTaskID, j: j, ctx: jctx, carrier: j.Carrier()})
	// The continuation's work is the run, in its job; a live parent is
	// all the job needed (contract: no background span under an ended one).
	cont.End()
	return true
}

// addJob tracks jb by its task id (the newest run of the task) and its
// run id.
func (m *mapper) addJob(jb *job) {
	m.jobs[jb.taskID] = jb
	if jb.runID != "" {
		m.runs[jb.runID] = jb
	}
}

// jobOf returns the job of task t: the run t names, else the task's
// newest run.
func (m *mapper) jobOf(t task) (*job, bool) {
	if j, ok := m.runs[t.RunID]; ok && t.RunID != "" {
		return j, true
	}
	j, ok := m.jobs[t.ID]
	return j, ok
}

// noted returns the job whose notification a request delivering task
// id's names: a run whose notification waits for a turn, else the task's
// newest run.
func (m *mapper) noted(id string) (*job, bool) {
	for _, j := range m.pending {
		if j.taskID == id && j.j != nil {
			return j, true
		}
	}
	j, ok := m.jobs[id]
	return j, ok
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
	m.addJob(&job{taskID: t.ID, runID: t.RunID, parentTask: t.ParentTaskID, j: j, ctx: jctx, carrier: j.Carrier()})
}

func (m *mapper) taskUpdated(t task) {
	if fg, ok := m.foreground[t.ID]; ok && t.Backgrounded {
		// A foreground command moved to the background.
		delete(m.foreground, t.ID)
		fg.Backgrounded = true
		m.startJob(fg)
	}
	if j, ok := m.jobOf(t); ok && t.Status != "" {
		m.endJob(j, t.Status, nil)
	}
}

// taskNotification handles the notification the CLI posts when a task
// ends: a background task's job ends and its notification waits for the
// turn that reads it.
func (m *mapper) taskNotification(t task) {
	j, ok := m.jobOf(t)
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
