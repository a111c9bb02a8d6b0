package statusapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxWatchWait is the longest wait Watch asks of a collector whose
// configuration is the default (its max_watch_wait, 60s); ask for less
// on a collector configured lower.
const MaxWatchWait = time.Minute

// Watch waits until the session changes after the version token after,
// for at most wait, and returns the session's state with the token to
// pass to the next Watch: it returns at once when the session is not at
// after, so the first call (after "") returns the current state and its
// token. A change is any of: the session appears or vanishes, OwesWork
// changes, the session wakes by itself (an unattributed turn joins it),
// one of its invocations turns final or incomplete. When wait passes
// with no change, next equals after.
//
// A host that released an idle session calls Watch in a loop with the
// token it got last, and reattaches when OwesWork turns true or a turn
// it did not start shows up. With several collectors the token holds one
// version per collector (in the order given to NewClient), and Watch
// returns when any of them changes, with the state combined as Session
// does. A session no collector knows is the empty Session, not
// ErrNotFound, so that a watch can wait for it to appear.
func (c *Client) Watch(ctx context.Context, session string, after string, wait time.Duration) (s Session, next string, err error) {
	versions, err := c.parseToken(after)
	if err != nil {
		return Session{}, "", err
	}
	if wait < 0 {
		wait = 0
	}
	c = c.waiting(wait)
	path := "/v1/sessions/" + url.PathEscape(session)
	query := func(i int, wait time.Duration) url.Values {
		q := url.Values{}
		q.Set("wait", wait.String())
		q.Set("after", strconv.FormatUint(versions[i], 10))
		return c.query(q)
	}
	answers := make([]Session, len(c.bases))
	errs := make([]error, len(c.bases))
	// Every collector waits; the first that answers with a change ends
	// the others' waits.
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, base := range c.bases {
		wg.Go(func() {
			_, errs[i] = c.get(wctx, base, path, query(i, wait), &answers[i])
			if errs[i] == nil && answers[i].Version != versions[i] {
				cancel()
			}
		})
	}
	wg.Wait()
	cancel()
	changed := false
	for i := range c.bases {
		if errs[i] == nil && answers[i].Version != versions[i] {
			changed = true
		}
	}
	if changed && len(c.bases) > 1 {
		// The waits the change ended were cut: read every collector's
		// state now, without waiting.
		for i, base := range c.bases {
			wg.Go(func() {
				answers[i] = Session{}
				_, errs[i] = c.get(ctx, base, path, query(i, 0), &answers[i])
			})
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return Session{}, "", err
	}
	out := Session{Session: session, OpenInvocations: []Invocation{}, Jobs: []SessionJob{}, ClosedInvocations: []string{}}
	tokens := make([]string, len(answers))
	for i, a := range answers {
		tokens[i] = strconv.FormatUint(a.Version, 10)
		out.OwesWork = out.OwesWork || a.OwesWork
		out.OpenInvocations = append(out.OpenInvocations, a.OpenInvocations...)
		out.Jobs = append(out.Jobs, a.Jobs...)
		out.ClosedInvocations = append(out.ClosedInvocations, a.ClosedInvocations...)
	}
	if len(answers) == 1 {
		out.Version = answers[0].Version
	}
	slices.SortStableFunc(out.OpenInvocations, func(a, b Invocation) int { return a.Started.Compare(b.Started) })
	slices.SortStableFunc(out.Jobs, func(a, b SessionJob) int { return a.Started.Compare(b.Started) })
	return out, strings.Join(tokens, ","), nil
}

// watchMargin is how much longer than its wait a watch's request may take.
const watchMargin = 10 * time.Second

// waiting returns c with an HTTP client whose timeout, if any, lets a
// request wait for wait.
func (c *Client) waiting(wait time.Duration) *Client {
	if c.http.Timeout <= 0 || c.http.Timeout >= wait+watchMargin {
		return c
	}
	hc := *c.http
	hc.Timeout = wait + watchMargin
	cc := *c
	cc.http = &hc
	return &cc
}

// parseToken reads a Watch token: one version per collector; "" is all
// zero.
func (c *Client) parseToken(tok string) ([]uint64, error) {
	out := make([]uint64, len(c.bases))
	if tok == "" {
		return out, nil
	}
	parts := strings.Split(tok, ",")
	if len(parts) != len(c.bases) {
		return nil, fmt.Errorf("statusapi: watch token %q has %d versions for %d collectors (pass the token Watch returned)", tok, len(parts), len(c.bases))
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("statusapi: watch token %q: %q is not a version (pass the token Watch returned)", tok, p)
		}
		out[i] = v
	}
	return out, nil
}
