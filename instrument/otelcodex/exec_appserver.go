package otelcodex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
)

// maxStarts bounds the host's turn/starts awaiting their response.
const maxStarts = 1024

// feed copies the host's JSON-RPC to app-server, noting each turn/start
// before its line is passed on. It ends when the input does (closing
// app-server's stdin, which ends it) or a write fails (it has exited).
func (x *Process) feed(in io.Reader, out io.WriteCloser) {
	defer out.Close()
	r := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > x.c.cfg.maxLine {
			// Too long to read: passed on as it comes, unread.
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
			x.request(line)
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

// request notes a host's turn/start: its turn's requests may come before
// its response is read.
func (x *Process) request(line []byte) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ThreadID string `json:"threadId"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &req) != nil || req.Method != "turn/start" || len(req.ID) == 0 {
		return
	}
	key := string(req.ID)
	x.startsMu.Lock()
	defer x.startsMu.Unlock()
	if _, dup := x.starts[key]; dup {
		return
	}
	if len(x.startOrder) >= maxStarts {
		// Never answered: forgotten, and its turn unknown.
		delete(x.starts, x.startOrder[0])
		x.startOrder = x.startOrder[1:]
		x.m.started("", context.Background())
	}
	x.starts[key] = req.Params.ThreadID
	x.startOrder = append(x.startOrder, key)
	x.m.sending()
}

// response handles app-server's response to a host's request: the turn id
// of a turn/start starts its invocation.
func (x *Process) response(msg rpcMessage) {
	key := string(msg.ID)
	x.startsMu.Lock()
	thread, ok := x.starts[key]
	if ok {
		delete(x.starts, key)
		for i, k := range x.startOrder {
			if k == key {
				x.startOrder = append(x.startOrder[:i], x.startOrder[i+1:]...)
				break
			}
		}
	}
	x.startsMu.Unlock()
	if !ok {
		return
	}
	var res struct {
		Turn turnInfo `json:"turn"`
	}
	if msg.Error != nil || json.Unmarshal(msg.Result, &res) != nil || res.Turn.ID == "" {
		x.m.started("", context.Background())
		return
	}
	if ctx, running := x.m.turnContext(res.Turn.ID); running {
		// The prompt joined a running turn: started taints both.
		x.m.started(res.Turn.ID, ctx)
		return
	}
	x.m.mu.Lock()
	x.m.session = thread
	x.m.mu.Unlock()
	ctx, _ := x.startInvocation(context.Background(), res.Turn.ID, thread)
	x.m.started(res.Turn.ID, ctx)
}

// turnContext returns the context of the turn id when it is known and
// still runs.
func (m *mapper) turnContext(id string) (context.Context, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.turns[id]
	if !ok || t.ended {
		return nil, false
	}
	return t.ctx, true
}
