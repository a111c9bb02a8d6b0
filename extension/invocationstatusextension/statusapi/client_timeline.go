package statusapi // import "github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"

import (
	"context"
	"fmt"
	"net/url"
)

// Timeline returns what the collectors know about the invocation with its
// recorded spans (GET /v1/invocations/{id}?spans=1; Invocation.Timeline),
// or ErrNotFound. Several backends are combined as Invocation combines
// them: the open view, else the highest revision.
func (c *Client) Timeline(ctx context.Context, id string) (Invocation, error) {
	var found []Invocation
	err := c.each(ctx, "/v1/invocations/"+url.PathEscape(id), c.query(url.Values{"spans": {"1"}}), func() any { return new(Invocation) }, func(v any) {
		found = append(found, *v.(*Invocation))
	})
	if err != nil {
		return Invocation{}, err
	}
	if len(found) == 0 {
		return Invocation{}, fmt.Errorf("invocation %s: %w", id, ErrNotFound)
	}
	best := found[0]
	for _, inv := range found[1:] {
		if inv.Open() && !best.Open() || inv.Open() == best.Open() && inv.Revision > best.Revision {
			best = inv
		}
	}
	return best, nil
}
