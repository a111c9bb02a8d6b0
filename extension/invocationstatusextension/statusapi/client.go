package statusapi // import "github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNotFound is returned when no collector asked knows the invocation or
// session.
var ErrNotFound = errors.New("statusapi: not found")

// maxBody bounds the answer the client reads (a session with many open
// invocations is the largest).
const maxBody = 32 << 20

// Client asks one collector, or every backend of a load-balanced tier, over
// the invocation_status API. It is safe for concurrent use.
type Client struct {
	bases  []*url.URL
	http   *http.Client
	header http.Header
	tenant string
}

// Option configures a Client.
type Option interface{ apply(*Client) }

type optionFunc func(*Client)

func (f optionFunc) apply(c *Client) { f(c) }

// WithHTTPClient sends the requests with hc (for TLS settings, timeouts);
// nil keeps the default, a client with a 10 s timeout.
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	})
}

// WithBearerToken sends "Authorization: Bearer <token>" with every request,
// as the bearertokenauth extension expects; empty sends none.
func WithBearerToken(token string) Option {
	return optionFunc(func(c *Client) {
		if token != "" {
			c.header.Set("Authorization", "Bearer "+token)
		}
	})
}

// WithTenant asks about the invocations and sessions of one tenant, for a
// collector whose processor has the tenant setting: invocation IDs and
// session names are then the tenant's own. Empty (the default) asks about
// those without a tenant.
func WithTenant(tenant string) Option {
	return optionFunc(func(c *Client) { c.tenant = tenant })
}

// query returns the tenant's query parameters, plus those of q.
func (c *Client) query(q url.Values) url.Values {
	if c.tenant == "" {
		return q
	}
	if q == nil {
		q = url.Values{}
	}
	q.Set("tenant", c.tenant)
	return q
}

// NewClient returns a client for the collectors at baseURLs (for example
// http://127.0.0.1:55690). With more than one, every question is asked of
// all of them and the answers are combined: behind a load-balancing tier
// each backend holds only the invocations routed to it, and a session's
// invocations are spread over all backends.
func NewClient(baseURLs []string, opts ...Option) (*Client, error) {
	if len(baseURLs) == 0 {
		return nil, errors.New("statusapi: no collector URL")
	}
	c := &Client{http: &http.Client{Timeout: 10 * time.Second}, header: http.Header{}}
	for _, raw := range baseURLs {
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		if err != nil {
			return nil, fmt.Errorf("statusapi: collector URL %q: %w", raw, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("statusapi: collector URL %q: want http://host:port or https://host:port", raw)
		}
		c.bases = append(c.bases, u)
	}
	for _, o := range opts {
		o.apply(c)
	}
	return c, nil
}

// Invocation returns what the collectors know about the invocation, or
// ErrNotFound. When several backends know it (an invocation split by
// resharding), the open view is returned, else the highest revision.
func (c *Client) Invocation(ctx context.Context, id string) (Invocation, error) {
	var found []Invocation
	err := c.each(ctx, "/v1/invocations/"+url.PathEscape(id), c.query(nil), func() any { return new(Invocation) }, func(v any) {
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

// Waiting returns what the invocation still waits on: the zero Waiting
// once it is closed (final or incomplete), ErrNotFound when no collector
// knows it.
func (c *Client) Waiting(ctx context.Context, id string) (Waiting, error) {
	inv, err := c.Invocation(ctx, id)
	if err != nil {
		return Waiting{}, err
	}
	if inv.Waiting == nil {
		return Waiting{}, nil
	}
	return *inv.Waiting, nil
}

// Session returns the session's state combined over the collectors, or
// ErrNotFound when none knows an invocation of it.
func (c *Client) Session(ctx context.Context, session string) (Session, error) {
	out := Session{Session: session}
	known := false
	err := c.each(ctx, "/v1/sessions/"+url.PathEscape(session), c.query(nil), func() any { return new(Session) }, func(v any) {
		s := v.(*Session)
		known = true
		out.OwesWork = out.OwesWork || s.OwesWork
		out.OpenInvocations = append(out.OpenInvocations, s.OpenInvocations...)
		out.Jobs = append(out.Jobs, s.Jobs...)
		out.ClosedInvocations = append(out.ClosedInvocations, s.ClosedInvocations...)
	})
	if err != nil {
		return Session{}, err
	}
	if !known {
		return Session{}, fmt.Errorf("session %s: %w", session, ErrNotFound)
	}
	slices.SortStableFunc(out.OpenInvocations, func(a, b Invocation) int { return a.Started.Compare(b.Started) })
	slices.SortStableFunc(out.Jobs, func(a, b SessionJob) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// OwesWork reports whether the session still owes work to one of its
// invocations (Session.OwesWork). It fails closed: a session no collector
// knows is unknown, not idle, so it answers true with an error wrapping
// ErrNotFound (its spans may not have been exported yet, or the
// collector forgot it); any other error (a backend that cannot be asked)
// answers true with that error. Only a false with a nil error lets a host
// release the session.
//
// The collector sees a span only once the agent exported it: flush the
// agent's span pipeline (TracerProvider.ForceFlush) before asking about a
// session whose turn just ended.
func (c *Client) OwesWork(ctx context.Context, session string) (bool, error) {
	s, err := c.Session(ctx, session)
	if err != nil {
		return true, err
	}
	return s.OwesWork, nil
}

// ListOptions filters GET /v1/invocations.
type ListOptions struct {
	// Status keeps invocations with this status; empty keeps all.
	Status Status
	// OlderThan keeps invocations that started at least this long ago;
	// zero keeps all.
	OlderThan time.Duration
	// Session keeps the invocations of one session; empty keeps all.
	Session string
	// Limit is the page size (1 to 1000); zero means the server's default,
	// 100.
	Limit int
	// PageToken continues a previous page. Only with a single collector:
	// with several, List returns every backend's first page.
	PageToken string
}

// List returns the invocations matching o. With several collectors the
// pages are merged (oldest first) and Total is summed; NextPageToken is
// set only with a single collector.
func (c *Client) List(ctx context.Context, o ListOptions) (InvocationList, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", string(o.Status))
	}
	if o.OlderThan > 0 {
		q.Set("older_than", o.OlderThan.String())
	}
	if o.Session != "" {
		q.Set("session", o.Session)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.PageToken != "" {
		if len(c.bases) > 1 {
			return InvocationList{}, errors.New("statusapi: page tokens need a client for a single collector")
		}
		q.Set("page_token", o.PageToken)
	}
	var out InvocationList
	pages := 0
	err := c.each(ctx, "/v1/invocations", c.query(q), func() any { return new(InvocationList) }, func(v any) {
		l := v.(*InvocationList)
		pages++
		out.Invocations = append(out.Invocations, l.Invocations...)
		out.Total += l.Total
		out.NextPageToken = l.NextPageToken
	})
	if err != nil {
		return InvocationList{}, err
	}
	if len(c.bases) > 1 {
		out.NextPageToken = ""
		slices.SortStableFunc(out.Invocations, func(a, b Invocation) int {
			if n := a.Started.Compare(b.Started); n != 0 {
				return n
			}
			if n := strings.Compare(a.Tenant, b.Tenant); n != 0 {
				return n
			}
			return strings.Compare(a.ID, b.ID)
		})
	}
	if out.Invocations == nil {
		out.Invocations = []Invocation{}
	}
	return out, nil
}

// each GETs path from every collector concurrently; found is called, in
// collector order, with each 200 answer decoded into a value from alloc.
// 404s are skipped; any other failure is an error.
func (c *Client) each(ctx context.Context, path string, q url.Values, alloc func() any, found func(any)) error {
	type answer struct {
		v   any
		err error
	}
	answers := make([]answer, len(c.bases))
	var wg sync.WaitGroup
	for i, base := range c.bases {
		wg.Go(func() {
			v := alloc()
			ok, err := c.get(ctx, base, path, q, v)
			if ok {
				answers[i].v = v
			}
			answers[i].err = err
		})
	}
	wg.Wait()
	var errs []error
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
		} else if a.v != nil {
			found(a.v)
		}
	}
	return errors.Join(errs...)
}

// get fetches one answer; ok is false for a 404.
func (c *Client) get(ctx context.Context, base *url.URL, path string, q url.Values, v any) (ok bool, err error) {
	// path holds PathEscape'd segments; appending to the base's string
	// form keeps them escaped.
	target := base.String() + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false, fmt.Errorf("statusapi: %w", err)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return false, fmt.Errorf("statusapi: GET %s: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return false, fmt.Errorf("statusapi: GET %s: %w", target, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, nil
	default:
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return false, fmt.Errorf("statusapi: GET %s: %s: %s", target, resp.Status, e.Error)
		}
		return false, fmt.Errorf("statusapi: GET %s: %s", target, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("statusapi: GET %s: decode: %w", target, err)
	}
	return true, nil
}
