package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentledger/agentledger/instrument/otelopencode"
)

// proxyConfig is `agentledger opencode-proxy`'s flags.
type proxyConfig struct {
	listen   string
	upstream *url.URL
	// modelUpstream, when set, starts the model-wire proxy in front of
	// it, on modelListen (a free loopback port when "").
	modelUpstream, modelListen string
	// opencodeConfig, when set, is the opencode.json whose
	// provider.<provider>.options.baseURL is set to the model-wire
	// proxy's URL before the proxy waits for opencode serve.
	opencodeConfig, provider string
	// connectTimeout bounds the wait for opencode serve's event stream.
	connectTimeout time.Duration
}

func parseProxyFlags(args []string, io stdio) (proxyConfig, error) {
	fs := flag.NewFlagSet("agentledger opencode-proxy", flag.ContinueOnError)
	fs.SetOutput(io.err)
	var c proxyConfig
	var upstream string
	fs.StringVar(&c.listen, "listen", "127.0.0.1:4097", "address to serve the proxy on (host:port); give the SDK's baseUrl http://<this>")
	fs.StringVar(&upstream, "upstream", "", "base URL of `opencode serve`, e.g. http://127.0.0.1:4096 (required)")
	fs.StringVar(&c.modelUpstream, "model-upstream", "", "the model endpoint OpenCode's provider calls (its base URL, e.g. https://api.openai.com/v1): count every model request on the wire through a proxy in front of it; point the provider's baseURL at the proxy")
	fs.StringVar(&c.modelListen, "model-listen", "", "address of the model-wire proxy (host:port; default a free loopback port, printed), so that OpenCode's config can name it before it starts")
	fs.StringVar(&c.opencodeConfig, "opencode-config", "", "an opencode.json to set the provider's baseURL in (to the model-wire proxy's URL; needs --model-upstream), written before the proxy waits for opencode serve: start the proxy first, then opencode serve within --connect-timeout")
	fs.StringVar(&c.provider, "provider", "openai", "the provider id whose baseURL --opencode-config sets")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 30*time.Second, "how long to wait at start for opencode serve's event stream")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.connectTimeout <= 0 {
		return c, fmt.Errorf("--connect-timeout %s: want a positive duration", c.connectTimeout)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if upstream == "" {
		return c, errors.New("--upstream is required: the URL of opencode serve, e.g. --upstream http://127.0.0.1:4096")
	}
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("--upstream %q: want an http or https URL with a host, e.g. http://127.0.0.1:4096", upstream)
	}
	c.upstream = u
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return c, fmt.Errorf("--listen %q: want host:port, e.g. 127.0.0.1:4097: %w", c.listen, err)
	}
	if c.modelUpstream != "" {
		m, err := url.Parse(c.modelUpstream)
		if err != nil || (m.Scheme != "http" && m.Scheme != "https") || m.Host == "" {
			return c, fmt.Errorf("--model-upstream %q: want an http or https URL with a host, e.g. https://api.openai.com/v1", c.modelUpstream)
		}
	}
	if c.opencodeConfig != "" {
		if c.modelUpstream == "" {
			return c, errors.New("--opencode-config needs --model-upstream: the baseURL it writes is the model-wire proxy's")
		}
		if c.provider == "" {
			return c, errors.New("--provider is empty: want the provider id of opencode.json whose baseURL to set, e.g. openai")
		}
	}
	if c.modelListen != "" {
		if c.modelUpstream == "" {
			return c, errors.New("--model-listen needs --model-upstream: the endpoint the model-wire proxy forwards to")
		}
		if _, _, err := net.SplitHostPort(c.modelListen); err != nil {
			return c, fmt.Errorf("--model-listen %q: want host:port: %w", c.modelListen, err)
		}
	}
	return c, nil
}

// baseURLHint is the "baseURL" entry of opencode.json for the model-wire
// proxy at proxyURL in front of upstream, and the other form the proxy
// accepts (proxyURL and upstream's path, see wireproxy.UpstreamPath).
func baseURLHint(proxyURL, upstream string) string {
	hint := fmt.Sprintf(`"baseURL": %q`, proxyURL)
	if u, err := url.Parse(upstream); err == nil {
		if p := strings.TrimRight(u.EscapedPath(), "/"); p != "" {
			hint += fmt.Sprintf(" (or %q: the proxy drops one leading %s)", proxyURL+p, p)
		}
	}
	return hint
}

// runOpencodeProxy is `agentledger opencode-proxy`: every request and the
// /event stream pass through to opencode serve; each prompt (POST
// /session/:id/message) is recorded as an invocation, as
// otelopencode.Client.Transport does, whose id is its user message's id.
// It runs until SIGINT or SIGTERM.
func runOpencodeProxy(ctx context.Context, env environ, args []string, io stdio) int {
	c, err := parseProxyFlags(args, io)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(io.err, "agentledger opencode-proxy: %v\n", err)
		return 2
	}
	cfg, err := readExportConfig(env)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger opencode-proxy: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tp, err := newPipeline(ctx, cfg, "agentledger-opencode", io.err)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger opencode-proxy: %v\n", err)
		return 2
	}
	defer shutdownPipeline(tp, cfg, io.err)
	opts := []otelopencode.Option{otelopencode.WithTracerProvider(tp), otelopencode.WithMessageInvocationIDs(), otelopencode.WithFlushTimeout(cfg.flush)}
	if c.modelUpstream != "" {
		opts = append(opts, otelopencode.WithModelProxy(c.modelUpstream))
		if c.modelListen != "" {
			opts = append(opts, otelopencode.WithModelProxyAddress(c.modelListen))
		}
	}
	client, err := otelopencode.New(c.upstream.String(), nil, opts...)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger opencode-proxy: %v\n", err)
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdown)
		defer cancel()
		_ = client.Shutdown(sctx)
	}()
	if u := client.ModelProxyURL(); u != "" {
		// The model-wire proxy listens from New on: its URL is known now,
		// before opencode serve has to read it.
		if c.opencodeConfig != "" {
			if err := otelopencode.WriteProviderConfig(c.opencodeConfig, c.provider, u); err != nil {
				fmt.Fprintf(io.err, "agentledger opencode-proxy: --opencode-config: %v\n", err)
				return 1
			}
			fmt.Fprintf(io.err, "agentledger opencode-proxy: set provider.%s.options.baseURL to %q in %s\n", c.provider, u, c.opencodeConfig)
		} else {
			fmt.Fprintf(io.err, "agentledger opencode-proxy: the provider's baseURL in opencode.json: %s\n", baseURLHint(u, c.modelUpstream))
		}
	}
	// Prompts are recorded from the event stream: serve only once it is
	// connected (it reconnects by itself after).
	sctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	err = client.Start(sctx)
	cancel()
	if err != nil {
		fmt.Fprintf(io.err, "agentledger opencode-proxy: the event stream of %s (GET /event) did not connect within %s (--connect-timeout): %v\n", c.upstream, c.connectTimeout, err)
		return 1
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger opencode-proxy: --listen %s: %v\n", c.listen, err)
		return 1
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(c.upstream) },
		Transport: client.Transport(http.DefaultTransport),
		// The /event stream is server-sent events: pass each at once.
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: time.Minute}
	msg := fmt.Sprintf("agentledger opencode-proxy: listening on http://%s, upstream %s", ln.Addr(), c.upstream)
	if u := client.ModelProxyURL(); u != "" {
		msg += ", model-wire proxy " + u + " (the provider's baseURL) in front of " + c.modelUpstream
	}
	fmt.Fprintln(io.err, msg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(io.err, "agentledger opencode-proxy: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	// The /event streams never end by themselves: wait a little for the
	// prompts in flight, then close.
	sctx, scancel := context.WithTimeout(context.Background(), cfg.shutdown)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return 0
}
