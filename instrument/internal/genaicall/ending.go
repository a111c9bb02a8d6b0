package genaicall

import (
	"context"
	"errors"
	"net"

	"github.com/agentledger/agentledger/contract"
)

// Ending is how a model call ended: one of the contract's Ending* values,
// recorded as invocation.response.ending. It is decided here, once, for
// every wrapper and the model-wire proxy (CONTRACT.md, "How a model call
// ended"); Bill says what it means.
type Ending string

// The endings, in the order of CONTRACT.md's table.
const (
	EndingComplete     Ending = contract.EndingComplete
	EndingErrorStatus  Ending = contract.EndingErrorStatus
	EndingNotSent      Ending = contract.EndingNotSent
	EndingNoResponse   Ending = contract.EndingNoResponse
	EndingTimeout      Ending = contract.EndingTimeout
	EndingCut          Ending = contract.EndingCut
	EndingCallerClosed Ending = contract.EndingCallerClosed
	EndingErrorEvent   Ending = contract.EndingErrorEvent
	EndingNoUsage      Ending = contract.EndingNoUsage
)

// Endings lists every Ending.
var Endings = []Ending{
	EndingComplete, EndingErrorStatus, EndingNotSent, EndingNoResponse, EndingTimeout,
	EndingCut, EndingCallerClosed, EndingErrorEvent, EndingNoUsage,
}

// Bill is what an ending means for what the provider billed.
type Bill int

const (
	// BillKnown: the usage the response reported is the bill; the span
	// carries it.
	BillKnown Bill = iota + 1
	// BillNone: the provider billed nothing; the span has status Error
	// and no usage (rule 5: a failed call owes no usage).
	BillNone
	// BillUnknown: the provider may have billed anything; the span has no
	// usage and no error status, so that the rule reads usage_missing and
	// the invocation is never final.
	BillUnknown
)

// Bill returns what e means for the bill; an unknown ending is
// BillUnknown.
func (e Ending) Bill() Bill {
	switch e {
	case EndingComplete:
		return BillKnown
	case EndingErrorStatus, EndingNotSent:
		return BillNone
	}
	return BillUnknown
}

// transportEnding is the ending of an attempt that got no response: not
// sent only on proof that no connection was made (a dial or DNS failure),
// since a request that may have reached the provider may have been
// billed.
func transportEnding(err error) Ending {
	var op *net.OpError
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dns), errors.As(err, &op) && op.Op == "dial":
		return EndingNotSent
	case errors.Is(err, context.Canceled):
		return EndingCallerClosed
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return EndingTimeout
	}
	return EndingNoResponse
}

// bodyEnding is the ending of an attempt answered with a success status,
// from what its parser read (r) and how reading stopped: err is the read
// error, nil at EOF or at the terminal event; closed is set when the
// caller closed the body before either.
func bodyEnding(r *Result, err error, closed bool) Ending {
	switch {
	case r.ErrType != "":
		// An error in a 200 response: generation may have begun.
		return EndingErrorEvent
	case r.Done && r.Usage.Input == nil && r.Usage.Output == nil:
		return EndingNoUsage
	case r.Done:
		return EndingComplete
	case err != nil:
		if e := transportEnding(err); e == EndingTimeout || e == EndingCallerClosed {
			return e
		}
		return EndingCut
	case closed:
		return EndingCallerClosed
	}
	// The body ended without its terminal event.
	return EndingCut
}

// worse returns the ending that decides a call of two attempts' endings:
// an attempt whose bill is unknown (a request that may have been billed
// before the SDK retried it) leaves the call's bill unknown, whatever a
// later attempt got.
func worse(earlier, last Ending) Ending {
	if earlier != "" && earlier.Bill() == BillUnknown && last.Bill() != BillUnknown {
		return earlier
	}
	return last
}
