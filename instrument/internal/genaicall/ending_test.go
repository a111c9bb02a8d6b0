package genaicall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestTransportEnding: not sent only on proof that no connection was made.
func TestTransportEnding(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Ending
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, EndingNotSent},
		{fmt.Errorf("wrapped: %w", &net.DNSError{Err: "no such host", Name: "x"}), EndingNotSent},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, EndingNoResponse},
		{io.ErrUnexpectedEOF, EndingNoResponse},
		{errors.New("connection refused"), EndingNoResponse},
		{context.DeadlineExceeded, EndingTimeout},
		{&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, EndingTimeout},
		{fmt.Errorf("attempt: %w", context.Canceled), EndingCallerClosed},
	} {
		if got := transportEnding(tc.err); got != tc.want {
			t.Errorf("transportEnding(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// TestBodyEnding: known only with the terminal event (or the whole body)
// and usage, and no error.
func TestBodyEnding(t *testing.T) {
	n := int64(3)
	withUsage := Usage{Input: &n}
	for _, tc := range []struct {
		name   string
		r      Result
		err    error
		closed bool
		want   Ending
	}{
		{"terminal with usage", Result{Done: true, Usage: withUsage}, nil, false, EndingComplete},
		{"terminal with usage, then closed", Result{Done: true, Usage: withUsage}, nil, true, EndingComplete},
		{"terminal without usage", Result{Done: true}, nil, false, EndingNoUsage},
		{"error event after usage", Result{Done: true, Usage: withUsage, ErrType: "overloaded_error"}, nil, false, EndingErrorEvent},
		{"eof before terminal, partial usage", Result{Usage: withUsage}, nil, false, EndingCut},
		{"read error", Result{Usage: withUsage}, io.ErrUnexpectedEOF, false, EndingCut},
		{"read timeout", Result{Usage: withUsage}, context.DeadlineExceeded, false, EndingTimeout},
		{"read cancelled", Result{}, context.Canceled, false, EndingCallerClosed},
		{"closed early", Result{Usage: withUsage}, nil, true, EndingCallerClosed},
	} {
		if got := bodyEnding(&tc.r, tc.err, tc.closed); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	for _, e := range Endings {
		if e.Bill() == 0 {
			t.Errorf("%s has no bill", e)
		}
	}
}

// An attempt that timed out after it was sent may have been billed: a
// retry that completes does not make the call's bill known.
func TestUnknownAttemptKeepsTheCallUnknown(t *testing.T) {
	h := newHarness(false)
	if _, err := h.attempt(context.Background(), `{}`, 0, nil, context.DeadlineExceeded); err == nil {
		t.Fatal("no error")
	}
	res, err := h.attempt(context.Background(), `{}`, 1, response(200, "application/json", `{"in":4,"out":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	a := genaitest.Attrs(genaitest.Only(t, h.rec))
	genaitest.WantStr(t, a, contract.AttrResponseEnding, contract.EndingTimeout)
	genaitest.WantAbsent(t, a, append([]string{"error.type"}, genaitest.UsageKeys...)...)
	genaitest.WantInt(t, a, "http.request.resend_count", 1)
}

// A retryable status the SDK retried is not billed: the retry's usage is
// the call's.
func TestErrorStatusRetriedIsKnown(t *testing.T) {
	h := newHarness(false)
	res, _ := h.attempt(context.Background(), `{}`, 0, response(529, "application/json", `{}`), nil)
	_ = res.Body.Close()
	res, _ = h.attempt(context.Background(), `{}`, 1, response(200, "application/json", `{"in":4,"out":2}`), nil)
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	a := genaitest.Attrs(genaitest.Only(t, h.rec))
	genaitest.WantStr(t, a, contract.AttrResponseEnding, contract.EndingComplete)
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 4)
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 2)
}
