// Command shellagent is a small agent runtime on openai-go with a shell
// tool whose background jobs outlive the call that started them, and the
// agentledger instrumentation that keeps each invocation's token usage
// exact and final.
//
// It runs scenarios (foreground, background, interrupt-race, warm-second,
// consumed, long-background) against a model, by default a scripted
// OpenAI-compatible server started in process, and prints for each
// invocation one JSON line on stdout with its final usage; logs go to
// stderr. With -otlp it also exports its spans over OTLP/gRPC, so a
// collector with the invocation processor can compute the same numbers.
// With -status as well, its idle-session reaper asks that collector's
// invocation_status API whether a session still owes work, as an
// orchestrator in another process would, instead of its own ledger.
//
//	go run ./examples/shellagent -scenario background
//	go run ./examples/shellagent -all -otlp 127.0.0.1:4317
//	go run ./examples/shellagent -scenario long-background -otlp 127.0.0.1:4317 -status http://127.0.0.1:55690
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

type config struct {
	scenario     string
	all          bool
	otlp         string
	model        string
	timeout      time.Duration
	remoteSettle time.Duration
	// status lists the invocation_status API base URLs (one per backend of
	// a load-balanced tier) the idle reaper asks; empty: the in-process
	// ledger answers.
	status []string
	// exporter, when set, also receives every span (tests).
	exporter sdktrace.SpanExporter
}

func main() {
	var cfg config
	flag.StringVar(&cfg.scenario, "scenario", "background", "scenario to run")
	flag.BoolVar(&cfg.all, "all", false, "run every scenario")
	flag.StringVar(&cfg.otlp, "otlp", "", "OTLP/gRPC endpoint host:port (insecure); none: in-process ledger only")
	flag.StringVar(&cfg.model, "model", "", "OpenAI-compatible base URL (it must answer like the scripted responder in scenario.go; the consumed and interrupt-queued scenarios hold a response only in process); none: start the scripted model server in process")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest wait for every invocation to be final")
	flag.DurationVar(&cfg.remoteSettle, "remote-settle", instrument.DefaultRemoteSettle, "the ledger's remote settle time")
	status := flag.String("status", "", "invocation_status API URL(s) of the collector -otlp exports to, comma-separated (one per load-balanced backend); the idle reaper then asks it whether a session owes work")
	flag.Parse()
	if *status != "" {
		cfg.status = strings.Split(*status, ",")
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, os.Stdout, log); err != nil {
		log.Error("shellagent failed", "err", err)
		os.Exit(1)
	}
}

// line is the JSON line printed per invocation; the field names are
// compared with the collector's summaries.
type line struct {
	InvocationID            string `json:"invocation_id"`
	Scenario                string `json:"scenario"`
	SessionID               string `json:"session_id"`
	Status                  string `json:"status"`
	InputTokens             int64  `json:"input_tokens"`
	OutputTokens            int64  `json:"output_tokens"`
	CacheReadInputTokens    int64  `json:"cache_read_input_tokens"`
	ReasoningOutputTokens   int64  `json:"reasoning_output_tokens"`
	AfterResultInputTokens  int64  `json:"after_result_input_tokens"`
	AfterResultOutputTokens int64  `json:"after_result_output_tokens"`
	ModelCalls              int64  `json:"model_calls"`
	BackgroundJobs          int64  `json:"background_jobs"`
	Continuations           int64  `json:"continuations"`
	TimeToFinalMS           int64  `json:"time_to_final_ms"`
}

func lineOf(scenario, session string, s instrument.Summary) line {
	return line{
		InvocationID:            s.InvocationID,
		Scenario:                scenario,
		SessionID:               session,
		Status:                  string(s.Status),
		InputTokens:             s.Usage.InputTokens,
		OutputTokens:            s.Usage.OutputTokens,
		CacheReadInputTokens:    s.Usage.CacheReadInputTokens,
		ReasoningOutputTokens:   s.Usage.ReasoningOutputTokens,
		AfterResultInputTokens:  s.Usage.AfterResultInputTokens,
		AfterResultOutputTokens: s.Usage.AfterResultOutputTokens,
		ModelCalls:              s.Usage.ModelCalls,
		BackgroundJobs:          s.Usage.BackgroundJobs,
		Continuations:           s.Usage.Continuations,
		TimeToFinalMS:           s.TimeToFinalMS(),
	}
}

// app is the runtime with its telemetry pipeline and model.
type app struct {
	tp     *sdktrace.TracerProvider
	ledger *instrument.Ledger
	rt     *Runtime
	driver *driver
	model  *scriptedmodel.Server
	dir    string
	runs   int // scenarios run, to name sessions
}

func newApp(ctx context.Context, cfg config, log *slog.Logger) (*app, error) {
	var next sdktrace.SpanProcessor
	if cfg.otlp != "" {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.otlp), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		next = sdktrace.NewBatchSpanProcessor(exp)
	}
	if cfg.exporter != nil {
		next = sdktrace.NewSimpleSpanProcessor(cfg.exporter)
	}
	sp := instrument.NewSpanProcessor(next, instrument.WithRemoteSettle(cfg.remoteSettle))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		// Sampler declares any span the sampler drops inside an
		// invocation, so that nothing says final without it.
		sdktrace.WithSampler(instrument.Sampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("shellagent"))),
	)
	a := &app{tp: tp, ledger: sp.Ledger()}

	sc := newScript()
	baseURL := cfg.model
	if baseURL == "" {
		a.model = scriptedmodel.New(scriptedmodel.Options{Responder: sc.respond}).Start()
		baseURL = a.model.OpenAIBaseURL()
	}
	client := openai.NewClient(
		option.WithBaseURL(baseURL),
		option.WithAPIKey("scripted"),
		option.WithMaxRetries(0),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))),
	)
	dir, err := os.MkdirTemp("", "shellagent-")
	if err != nil {
		return nil, fmt.Errorf("gate directory: %w", err)
	}
	a.dir = dir
	idle := newSimClock(time.Now())
	a.rt = &Runtime{
		client:      client,
		model:       "scripted-model",
		agent:       "shellagent",
		tracker:     instrument.NewTracker(instrument.WithTracerProvider(tp)),
		ledger:      sp.Ledger(),
		tracer:      tp.Tracer("github.com/agentledger/agentledger/examples/shellagent"),
		idle:        idle,
		idleTimeout: idleWindow,
		log:         log,
		sessions:    make(map[string]*Session),
	}
	if len(cfg.status) > 0 {
		if cfg.otlp == "" {
			return nil, errors.New("-status needs -otlp: the collector must receive the spans it is asked about")
		}
		client, err := statusapi.NewClient(cfg.status)
		if err != nil {
			return nil, fmt.Errorf("-status: %w", err)
		}
		a.rt.collector = &collectorView{client: client, flush: tp.ForceFlush}
	}
	a.driver = newDriver(a.rt, sc, idle, dir)
	return a, nil
}

// close flushes and shuts down the pipeline and the model server.
func (a *app) close(ctx context.Context) error {
	err := a.tp.Shutdown(ctx)
	if a.model != nil {
		a.model.Close()
	}
	return errors.Join(err, os.RemoveAll(a.dir))
}

type started struct {
	scenario, session, invocation string
}

// runScenarios runs the scenarios in order and returns their invocations.
func (a *app) runScenarios(ctx context.Context, names []string) ([]started, error) {
	var out []started
	for _, name := range names {
		sc, ok := findScenario(name)
		if !ok {
			return out, fmt.Errorf("unknown scenario %q", name)
		}
		session := sessionID(name, a.runs)
		a.runs++
		ids, err := sc.run(a.driver, ctx, session)
		for _, id := range ids {
			if id != "" {
				out = append(out, started{name, session, id})
			}
		}
		if err != nil {
			a.driver.releaseGates()
			return out, fmt.Errorf("scenario %s: %w", name, err)
		}
	}
	return out, nil
}

// summaries waits for every invocation to be final (or ctx to end) and
// returns their lines.
func (a *app) summaries(ctx context.Context, invs []started) ([]line, error) {
	var lines []line
	var errs []error
	for _, inv := range invs {
		s, err := a.ledger.Wait(ctx, inv.invocation)
		errs = append(errs, err)
		lines = append(lines, lineOf(inv.scenario, inv.session, s))
	}
	return lines, errors.Join(errs...)
}

func run(ctx context.Context, cfg config, stdout io.Writer, log *slog.Logger) error {
	names := []string{cfg.scenario}
	if cfg.all {
		names = names[:0]
		for _, s := range scenarios {
			names = append(names, s.name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	a, err := newApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	invs, runErr := a.runScenarios(ctx, names)
	lines, waitErr := a.summaries(ctx, invs)
	enc := json.NewEncoder(stdout)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
	}
	bgErr := a.rt.Wait(ctx)
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelFlush()
	return errors.Join(runErr, waitErr, bgErr, a.close(flushCtx))
}
