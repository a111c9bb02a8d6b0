package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/extension"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// statusExtension keeps what the invocation processor publishes and serves
// it over HTTP.
type statusExtension struct {
	cfg   *Config
	set   component.TelemetrySettings
	now   func() time.Time
	store *store
	page  *pageRenderer
	// timeline renders one invocation's page (timeline.go).
	timeline *timelineRenderer
	hosts    hostGuard
	// nameLimit is the longest session name the ledger keeps (the
	// processor's max_name_bytes, told by LimitNames); 0 until told.
	nameLimit atomic.Int64
	// timer starts the timer of a watch's wait (time.NewTimer; tests fire
	// their own).
	timer func(time.Duration) (<-chan time.Time, func() bool)
	// stopping is closed by Shutdown: waiting watches answer at once.
	stopping chan struct{}

	// lifeMu guards server, served, addr and stopped, the HTTP server's
	// lifecycle.
	lifeMu  sync.Mutex
	server  *http.Server
	served  chan struct{}
	addr    net.Addr
	stopped bool
}

var _ extension.Extension = (*statusExtension)(nil)

func newExtension(cfg *Config, set component.TelemetrySettings, now func() time.Time) (*statusExtension, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invocation_status config: %w", err)
	}
	page, err := newPageRenderer(cfg)
	if err != nil {
		return nil, err
	}
	timeline, err := newTimelineRenderer()
	if err != nil {
		return nil, err
	}
	return &statusExtension{
		cfg: cfg, set: set, now: now, page: page, timeline: timeline,
		store:    newStore(cfg.MaxClosed, cfg.MaxClosedBytes, cfg.MaxSessionWatches),
		hosts:    newHostGuard(cfg.ServerConfig.NetAddr.Endpoint, cfg.AllowedHosts),
		timer:    systemTimer,
		stopping: make(chan struct{}),
	}, nil
}

func systemTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// PublishInvocations records the processor's latest views (see
// invocationprocessor.StatusSink).
func (e *statusExtension) PublishInvocations(views []statusapi.Invocation) {
	e.store.publish(views)
}

// LimitNames tells the extension the longest name the ledger keeps of a
// session (the processor's max_name_bytes): the ledger cuts a longer one,
// so a question about a longer session cannot be answered and is refused
// rather than answered "owes no work". With several processors the
// smallest limit holds.
func (e *statusExtension) LimitNames(maxBytes int) {
	for {
		cur := e.nameLimit.Load()
		if cur != 0 && cur <= int64(maxBytes) || e.nameLimit.CompareAndSwap(cur, int64(maxBytes)) {
			return
		}
	}
}

// Start listens on the configured endpoint and serves the API and the page.
func (e *statusExtension) Start(ctx context.Context, host component.Host) error {
	e.lifeMu.Lock()
	defer e.lifeMu.Unlock()
	if e.server != nil {
		return nil
	}
	ln, err := e.cfg.ServerConfig.ToListener(ctx)
	if err != nil {
		return fmt.Errorf("invocation_status: listen on %s: %w", e.cfg.ServerConfig.NetAddr.Endpoint, err)
	}
	srv, err := e.cfg.ServerConfig.ToServer(ctx, host.GetExtensions(), e.set, e.handler())
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("invocation_status: server: %w", err)
	}
	scheme := "http"
	if e.cfg.ServerConfig.TLS.HasValue() {
		scheme = "https"
	}
	e.set.Logger.Info("invocation status page and API", zap.String("url", scheme+"://"+ln.Addr().String()+"/"))
	e.server, e.served, e.addr = srv, make(chan struct{}), ln.Addr()
	go func(done chan<- struct{}) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			componentstatus.ReportStatus(host, componentstatus.NewFatalErrorEvent(err))
		}
	}(e.served)
	return nil
}

// Addr returns the address the server listens on; nil before Start.
func (e *statusExtension) Addr() net.Addr {
	e.lifeMu.Lock()
	defer e.lifeMu.Unlock()
	return e.addr
}

// Shutdown stops the HTTP server and waits for it to return; session
// watches still waiting answer at once.
func (e *statusExtension) Shutdown(ctx context.Context) error {
	e.lifeMu.Lock()
	if !e.stopped {
		e.stopped = true
		close(e.stopping)
	}
	srv, served := e.server, e.served
	e.server, e.served, e.addr = nil, nil, nil
	e.lifeMu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	select {
	case <-served:
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return err
}
