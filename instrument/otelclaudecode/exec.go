package otelclaudecode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/agentledger/agentledger/instrument"
)

// Stdio are the standard streams Exec passes through between a host and
// the CLI.
type Stdio struct {
	// Stdin is what the host writes to the CLI; nil gives it none
	// (/dev/null).
	Stdin io.Reader
	// Stdout gets the CLI's output, byte for byte as it comes.
	Stdout io.Writer
	// Stderr gets the CLI's stderr; nil keeps only the tail quoted in
	// errors.
	Stderr io.Writer
}

// Exec runs the CLI as a drop-in for the claude executable, for a host
// that drives it itself (the Claude Agent SDK's
// pathToClaudeCodeExecutable, a Python host's CLI path): with args
// exactly as given, nothing added, and the host's streams passed through
// unchanged. The model wire goes through the Client's proxy as with Run
// (ANTHROPIC_BASE_URL is the proxy's; the upstream is resolved as New
// says).
//
// With --input-format stream-json the CLI reads the host's messages on
// stdin: every user message (type "user" with no parent_tool_use_id) is a
// prompt, and an invocation, whose root starts when the line is read,
// before it is passed on, and ends at the result that answers it. Its
// invocation id is the message's uuid when the host gave one (the CLI
// then names it in the result, and the host can ask the collector by it);
// without a uuid the id is a fresh one, and the prompts are answered in
// the order the CLI read them: a result that names no prompt answers the
// prompt whose turn ran and the unnamed ones before it. The session id
// (gen_ai.conversation.id) is the one the CLI prints. Everything else
// (background shells and subagents, continuations, unattributed turns) is
// recorded as for Run and Start.
//
// A Stdin or Stdout that is a terminal (an interactive session) is given
// to the CLI as it is: there is no stream to read, so each model request
// is an unattributed invocation of its own (its usage is counted, never
// final). Otherwise the CLI runs in a process group of its own and the
// caller passes signals on with Process.Signal; with a terminal it stays
// in the caller's, where the terminal's signals reach it directly.
//
// Process.Prompt and CloseInput do nothing for an Exec'd CLI: its input
// is the host's. Exec returns once the CLI has started; Process.Exited is
// closed, and ExitState says how it exited, once it has and everything
// it left open has ended. ctx bounds the CLI as with Start.
func (c *Client) Exec(ctx context.Context, args []string, stdio Stdio) (*Process, error) {
	m := newMapper(c.tracer, c.tracker, c.cfg.agent, "")
	p, err := c.newProcess(m, "")
	if err != nil {
		return nil, err
	}
	p.inputClosed = true
	cmd := c.command(ctx, p, args, nil)
	stdinTTY, stdoutTTY := isTerminal(stdio.Stdin), isTerminal(stdio.Stdout)
	p.group = !stdinTTY
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: p.group}
	switch f, isFile := stdio.Stderr.(*os.File); {
	case isFile:
		cmd.Stderr = f
	case stdio.Stderr != nil:
		cmd.Stderr = io.MultiWriter(p.stderr, stdio.Stderr)
	default:
		cmd.Stderr = p.stderr
	}
	var toCLI io.WriteCloser
	switch {
	case stdio.Stdin == nil:
	case stdinTTY:
		cmd.Stdin = stdio.Stdin
	default:
		if toCLI, err = cmd.StdinPipe(); err != nil {
			p.closeProxy()
			return nil, fmt.Errorf("otelclaudecode: stdin: %w", err)
		}
	}
	var stdout io.Reader
	if stdoutTTY {
		cmd.Stdout = stdio.Stdout
	} else {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			p.closeProxy()
			return nil, fmt.Errorf("otelclaudecode: stdout: %w", err)
		}
		p.tee = stdio.Stdout
	}
	if err := c.start(p, stdout); err != nil {
		return nil, err
	}
	if toCLI != nil {
		go p.feed(ctx, stdio.Stdin, toCLI)
	}
	return p, nil
}

// isTerminal reports whether s is a character device (a terminal, or
// /dev/null, which is as well given as it is).
func isTerminal(s any) bool {
	f, ok := s.(*os.File)
	if !ok || f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// feed copies the host's input to the CLI, registering each prompt before
// its line is passed on. It ends when the input does (closing the CLI's
// stdin) or a write to the CLI fails (it has exited).
func (p *Process) feed(ctx context.Context, in io.Reader, out io.WriteCloser) {
	defer out.Close()
	r := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > p.c.cfg.maxLine {
			// Too long to read: pass it on as it comes, unread.
			tooLong = true
			if _, werr := out.Write(line); werr != nil {
				return
			}
			line = line[:0]
		}
		if tooLong {
			if _, werr := out.Write(chunk); werr != nil {
				return
			}
		} else {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !tooLong && len(line) > 0 {
			if uuid, text, ok := decodeInput(line); ok {
				given := false
				if uuid == "" {
					line, uuid = namePrompt(line)
					given = uuid != ""
					if given {
						p.given.add(uuid)
					}
				}
				p.m.registerHost(ctx, uuid, text, given)
			}
			if _, werr := out.Write(line); werr != nil {
				return
			}
		}
		line, tooLong = line[:0], false
		if err != nil {
			return
		}
	}
}

// decodeInput reads one line a host writes to the CLI: ok for a user
// message that is a prompt (no parent_tool_use_id), with its uuid ("" when
// none) and the text the model will see first (its content string, or
// its first text block).
func decodeInput(line []byte) (uuid, text string, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return "", "", false
	}
	var in struct {
		Type            string          `json:"type"`
		UUID            json.RawMessage `json:"uuid"`
		ParentToolUseID json.RawMessage `json:"parent_tool_use_id"`
		Message         struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(line, &in) != nil || in.Type != typeUser || in.Message.Role != "user" {
		return "", "", false
	}
	if p := str(in.ParentToolUseID); p != "" {
		return "", "", false
	}
	if s, isString := stringContent(in.Message.Content); isString {
		return str(in.UUID), s, true
	}
	for _, b := range textBlocks(in.Message.Content) {
		if b != "" {
			return str(in.UUID), b, true
		}
	}
	return str(in.UUID), "", true
}

func stringContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func textBlocks(raw json.RawMessage) []string {
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	var out []string
	for _, b := range blocks {
		if b.Type == "text" {
			out = append(out, b.Text)
		}
	}
	return out
}

// maxUsedIDs bounds the prompt uuids a mapper remembers to make each an
// invocation id once.
const maxUsedIDs = 4096

// registerHost starts the invocation of a prompt the host is about to
// write (Exec): with the message's uuid as its invocation id when it has
// one not used before, else a fresh id. A uuid the drop-in gave
// (namePrompt) names the prompt, but the prompt is still answered in
// order as an unnamed one should a result not name it.
func (m *mapper) registerHost(ctx context.Context, uuid, text string, given bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited {
		return
	}
	m.seq++
	var inv *instrument.Invocation
	pctx := ctx
	if uuid != "" && m.fresh(uuid) {
		var err error
		if pctx, inv, err = m.tracker.StartInvocationWithID(ctx, uuid, m.agent, m.session); err != nil {
			inv = nil
		}
	}
	if inv == nil {
		pctx, inv = m.tracker.StartInvocation(ctx, m.agent, m.session)
	}
	inv.Span().SetAttributes(providerAttr)
	p := &prompt{uuid: uuid, text: text, seq: m.seq, ctx: pctx, inv: inv, done: make(chan struct{})}
	if uuid == "" {
		p.uuid, p.unnamed = fmt.Sprintf("#%d", m.seq), true
	}
	p.unnamed = p.unnamed || given
	m.prompts[p.uuid] = p
}

// fresh reports whether uuid was not made an invocation id before, and
// remembers it.
func (m *mapper) fresh(uuid string) bool {
	if m.used == nil {
		m.used = make(map[string]struct{})
	}
	if _, ok := m.used[uuid]; ok {
		return false
	}
	m.used[uuid] = struct{}{}
	m.usedOrder = append(m.usedOrder, uuid)
	if len(m.usedOrder) > maxUsedIDs {
		delete(m.used, m.usedOrder[0])
		m.usedOrder = m.usedOrder[1:]
	}
	return true
}

// answerUnnamed gives a result that names no prompt (and is no
// notification's) to the host's unnamed prompts it answers: the CLI reads
// prompts in order, and a turn that ends has read every prompt before the
// one it runs for (a prompt written while a turn runs is folded into its
// requests). With no turn running (a prompt that made no request) it
// answers the oldest; a continuation's or unattributed turn's answers
// none.
func (m *mapper) answerUnnamed(res Result) {
	upTo := 0
	switch {
	case m.turn != nil && m.turn.owner != nil:
		if !m.turn.owner.unnamed {
			return
		}
		upTo = m.turn.owner.seq
	case m.turn == nil:
		for _, p := range m.prompts {
			if p.unnamed && (upTo == 0 || p.seq < upTo) {
				upTo = p.seq
			}
		}
	}
	for key, p := range m.prompts {
		if p.unnamed && p.seq <= upTo {
			delete(m.prompts, key)
			m.finish(p, res, nil)
		}
	}
}
