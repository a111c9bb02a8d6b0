// Package wireproxy is the model-wire proxy of the runtime adapters
// (otelclaudecode, otelopencode): a reverse proxy on loopback between a
// runtime and its model endpoint. Every request passes through unchanged
// (streaming, headers, API keys and OAuth bearers) but for its
// Accept-Encoding, which the proxy leaves to its own transport so that it
// can read the responses. Each request the adapter's Describe says is a
// model call becomes one model-call span (genaicall), with the usage of
// its own response, under the context the adapter's Attribute chooses for
// it from what the request carries.
package wireproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// DefaultMaxBody bounds the request body the proxy reads to attribute a
// request (a long conversation is a few megabytes). A longer body is sent
// upstream untraced and counted in Stats.Oversized, and Config.Oversized
// is told, so that the adapter keeps its invocations from final.
const DefaultMaxBody = 64 << 20

// DefaultRetryHold is how long a model call answered with a retryable
// status (genaicall.IsRetryable), or whose upstream failed, stays open for
// the runtime's retry of the same request: the retry is the same call.
// It exceeds the runtimes' retry delays (the Stainless SDKs back off at
// most 8 s, honouring a Retry-After of up to a minute).
const DefaultRetryHold = time.Minute

// Decision is what the adapter decided about one request.
type Decision struct {
	// Ctx is the context the model-call span starts in: its parent and
	// invocation. A nil Ctx sends the request upstream untraced.
	Ctx context.Context
	// OnTool, when set, is told the id of every tool use the response
	// asks for, as the proxy reads it: before the runtime has it, so that
	// the request that returns the tool's result finds its owner.
	OnTool func(id string)
	// Done, when set, is called once, when the runtime is done with the
	// response, with the usage the call's span ended with (GenAI sense;
	// nil counts absent): an empty Usage when the request failed (its
	// span has no usage either), when what the provider billed is unknown
	// (genaicall.Ending), when the call is held for the runtime's retry
	// (its span is still open: the retry's Done tells its usage), or when
	// it was not traced.
	Done func(genaicall.Usage)
}

// Config configures a Proxy.
type Config struct {
	// Upstream is the model endpoint: the provider's base URL or a
	// gateway's; the request's path is joined to it.
	Upstream *url.URL
	// Transport sends the requests upstream (default: a clone of
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Middleware makes the model-call spans.
	Middleware *genaicall.Middleware
	// Describe reads a request: ok false passes it through untraced
	// (count_tokens, model lists, health checks).
	Describe func(req *http.Request, body []byte) (info genaicall.Request, ok bool)
	// Attribute chooses the owner of a model call from its request.
	Attribute func(req *http.Request, body []byte) Decision
	// MaxBody bounds the body read to attribute a request (default
	// DefaultMaxBody).
	MaxBody int64
	// Oversized, when set, is told of a request whose body was over
	// MaxBody: it went upstream untraced, so the adapter must keep the
	// invocations it may belong to from final.
	Oversized func(req *http.Request)
	// Listen is the address to listen on (default 127.0.0.1:0).
	Listen string
	// RetryHold is how long a failed attempt waits for the runtime's
	// retry before its call ends as failed (default DefaultRetryHold).
	RetryHold time.Duration
	// BaseAlias makes both the proxy's URL and the proxy's URL followed
	// by the upstream's path valid base URLs for the runtime (for an
	// upstream https://api.openai.com/v1, http://127.0.0.1:4098 and
	// http://127.0.0.1:4098/v1): see UpstreamPath.
	BaseAlias bool
}

// UpstreamPath is the path a request to the proxy's path reqPath is sent
// to at an upstream whose base path is base (the upstream URL's path).
// The request's path is joined to the base; with alias (Config.BaseAlias)
// one leading copy of the base is dropped first when the request's path
// begins with the whole base, segment by segment (for base /v1: /v1 and
// /v1/..., not /v10/...). The alias only rewrites a path that would
// otherwise reach the upstream with its base twice (/v1/v1/...), which no
// provider's API serves; a request that does not begin with the base is
// joined unchanged. With an empty or "/" base nothing is dropped, so an
// upstream given without its version (https://api.anthropic.com) needs the
// runtime's base URL to carry it (<proxy>/v1).
func UpstreamPath(base, reqPath string, alias bool) string {
	if alias {
		reqPath = dropAlias(base, reqPath)
	}
	return joinSlash(base, reqPath)
}

// dropAlias is p without its leading copy of the base path, "/" when p is
// the base itself; p when it does not begin with the whole base.
func dropAlias(base, p string) string {
	b := strings.TrimRight(base, "/")
	if b == "" || !strings.HasPrefix(p, b) {
		return p
	}
	switch rest := p[len(b):]; {
	case rest == "":
		return "/"
	case rest[0] != '/':
		return p
	default:
		return rest
	}
}

// joinSlash joins two paths with one slash between them, as
// httputil.ProxyRequest.SetURL joins the upstream's and the request's.
func joinSlash(a, b string) string {
	as, bs := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/")
	switch {
	case as && bs:
		return a + b[1:]
	case !as && !bs:
		return a + "/" + b
	}
	return a + b
}

// dropBase applies dropAlias to u's path before SetURL joins it.
func dropBase(u *url.URL, base string) {
	p := dropAlias(base, u.Path)
	if p == u.Path {
		return
	}
	u.Path = p
	// The escaped form loses the same prefix, or is rebuilt from Path.
	if u.RawPath != "" {
		eb := (&url.URL{Path: strings.TrimRight(base, "/")}).EscapedPath()
		if rest, ok := strings.CutPrefix(u.RawPath, eb); ok && (rest == "" || rest[0] == '/') {
			if rest == "" {
				rest = "/"
			}
			u.RawPath = rest
		} else {
			u.RawPath = ""
		}
	}
}

// Proxy is a running model-wire proxy.
type Proxy struct {
	cfg Config
	// own is the transport Start made, whose idle connections Close
	// closes; nil when Config.Transport was given.
	own *http.Transport
	ln  net.Listener
	srv *http.Server
	url string

	mu    sync.Mutex
	stats Stats
}

// Stats are counts of the requests the proxy relayed.
type Stats struct {
	// Calls are the model calls traced; Passed the requests passed
	// through untraced; Oversized the model calls whose body was over
	// MaxBody (passed through, the adapter told); Failed the requests whose
	// upstream could not be reached.
	Calls, Passed, Oversized, Failed int64
}

// Start listens and serves until Close.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Scheme == "" || cfg.Upstream.Host == "" {
		return nil, errors.New("wireproxy: upstream must be an absolute URL (scheme and host)")
	}
	if cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https" {
		return nil, fmt.Errorf("wireproxy: upstream scheme %q is not http or https", cfg.Upstream.Scheme)
	}
	if cfg.Middleware == nil || cfg.Describe == nil || cfg.Attribute == nil {
		return nil, errors.New("wireproxy: Middleware, Describe and Attribute are required")
	}
	var own *http.Transport
	if cfg.Transport == nil {
		own = http.DefaultTransport.(*http.Transport).Clone()
		// The proxy decompresses what it asked to be compressed, and the
		// runtime gets the plain body.
		own.DisableCompression = false
		cfg.Transport = own
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.RetryHold <= 0 {
		cfg.RetryHold = DefaultRetryHold
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("wireproxy: listen: %w", err)
	}
	p := &Proxy{cfg: cfg, own: own, ln: ln, url: "http://" + ln.Addr().String()}
	up := cfg.Upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			if cfg.BaseAlias {
				dropBase(r.Out.URL, up.Path)
			}
			r.SetURL(up)
			// The request's own Host goes upstream as the upstream's host
			// (SetURL); no X-Forwarded-* headers are added.
			// Accept-Encoding is left to the transport, which then
			// decompresses: the proxy must read the response.
			r.Out.Header.Del("Accept-Encoding")
		},
		Transport:     roundTripper{p},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.count(func(s *Stats) { s.Failed++ })
			http.Error(w, "agentledger model-wire proxy: upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL (http://127.0.0.1:port), to give the runtime
// as its model endpoint.
func (p *Proxy) URL() string { return p.url }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Proxy) count(f func(*Stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// Close stops listening and waits, until ctx is done, for the requests in
// flight (a stream the runtime is still reading), then cuts those left.
// The connections upstream of a transport Start made are closed.
func (p *Proxy) Close(ctx context.Context) error {
	err := p.srv.Shutdown(ctx)
	if err != nil {
		_ = p.srv.Close()
	}
	if p.own != nil {
		// A connection still in use is closed when it comes back.
		p.own.CloseIdleConnections()
	}
	return err
}

type roundTripper struct{ p *Proxy }

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	p := rt.p
	next := p.cfg.Transport.RoundTrip
	if req.Body == nil || req.Body == http.NoBody {
		p.count(func(s *Stats) { s.Passed++ })
		return next(req)
	}
	body, err := readBody(req, p.cfg.MaxBody)
	if err != nil {
		_ = req.Body.Close()
		return nil, fmt.Errorf("wireproxy: reading request body: %w", err)
	}
	if int64(len(body)) > p.cfg.MaxBody {
		// Too long to read whole: it goes upstream as it comes, and the
		// adapter learns that a model call went by uncounted.
		p.count(func(s *Stats) { s.Oversized++ })
		if p.cfg.Oversized != nil {
			p.cfg.Oversized(req)
		}
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
		req.GetBody = nil
		return next(req)
	}
	_ = req.Body.Close()
	genaicall.SetBody(req, body)
	info, ok := p.cfg.Describe(req, body)
	if !ok {
		p.count(func(s *Stats) { s.Passed++ })
		return next(req)
	}
	d := p.cfg.Attribute(req, body)
	if d.Ctx == nil {
		if d.Done != nil {
			d.Done(genaicall.Usage{})
		}
		p.count(func(s *Stats) { s.Passed++ })
		return next(req)
	}
	p.count(func(s *Stats) { s.Calls++ })
	w := &watch{Parser: info.Parser, onTool: d.OnTool}
	info.Parser = w
	info.RetryHold = p.cfg.RetryHold
	info.OnEnd = w.ended
	inbound := req.Context()
	// The call's context has d.Ctx's span and values. A failed attempt is
	// held for the runtime's retry for RetryHold (genaicall parks it),
	// whatever happens to the runtime's request: the retry comes on
	// another request, after this one's handler returned.
	callCtx, cancel := context.WithCancel(context.WithoutCancel(d.Ctx))
	context.AfterFunc(inbound, cancel)
	req = req.WithContext(callCtx)
	send := func(r *http.Request) (*http.Response, error) {
		// The span starts in callCtx, but the request upstream lives exactly
		// as long as the runtime's: it ends when the runtime hangs up or
		// Close cuts it, and at the latest when the handler returns, never
		// because d.Ctx is done (a caller that stopped waiting for its
		// prompt does not cancel the runtime's request).
		return next(r.WithContext(inbound))
	}
	res, err := p.cfg.Middleware.Handle(req, send, func([]byte) genaicall.Request { return info })
	if d.Done != nil {
		if err != nil || res == nil {
			d.Done(genaicall.Usage{})
		} else {
			res.Body = &doneBody{ReadCloser: res.Body, done: func() { d.Done(w.usage()) }}
		}
	}
	return res, err
}

// watch tells onTool of the tool uses a response asks for, as the wrapped
// parser reads them, and keeps the usage the call's span ended with.
type watch struct {
	genaicall.Parser
	onTool func(id string)

	// mu guards seen and billed: the parser runs under the body
	// watcher's lock, the call ends under none, usage is read when the
	// body is closed.
	mu   sync.Mutex
	seen int
	// billed is the usage the call's span ended with: empty until it
	// ended, and unless its ending's bill was known (genaicall.Ending).
	billed genaicall.Usage
}

// ended is the Request's OnEnd.
func (w *watch) ended(_ genaicall.Ending, u genaicall.Usage) {
	w.mu.Lock()
	w.billed = u
	w.mu.Unlock()
}

// usage returns the usage the span was ended with: none when the call
// has not ended (an attempt held for the runtime's retry) or when what
// it billed is unknown.
func (w *watch) usage() genaicall.Usage {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.billed
}

func (w *watch) ParseResponse(b []byte, r *genaicall.Result, capture bool) {
	w.Parser.ParseResponse(b, r, capture)
	w.tell(r)
}

func (w *watch) ParseEvent(data []byte, r *genaicall.Result, capture bool) (bool, bool) {
	keep, terminal := w.Parser.ParseEvent(data, r, capture)
	w.tell(r)
	return keep, terminal
}

func (w *watch) tell(r *genaicall.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ; w.seen < len(r.ToolCalls); w.seen++ {
		if w.onTool == nil {
			continue
		}
		// Entries are "name:id"; ids hold no colon.
		tc := r.ToolCalls[w.seen]
		if i := strings.LastIndexByte(tc, ':'); i >= 0 {
			w.onTool(tc[i+1:])
		}
	}
}

// doneBody calls done once, when the body is closed: the span has ended
// by then (the middleware's body wrapper ends it on close).
type doneBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *doneBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// readBody reads at most max+1 bytes of req's body, into a buffer of its
// Content-Length when that is declared and within max: a long
// conversation is read with one allocation, not io.ReadAll's growths.
func readBody(req *http.Request, max int64) ([]byte, error) {
	r := io.LimitReader(req.Body, max+1)
	if n := req.ContentLength; n > 0 && n <= max {
		buf := bytes.NewBuffer(make([]byte, 0, n+bytes.MinRead))
		_, err := buf.ReadFrom(r)
		return buf.Bytes(), err
	}
	return io.ReadAll(r)
}
