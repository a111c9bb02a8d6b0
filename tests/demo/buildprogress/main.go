// Command buildprogress runs a long build or install and shows progress a
// person can read instead of its verbose output, which goes whole to a log
// file. The Makefile runs the collector, Jaeger, demo and npm builds through
// it.
//
//	buildprogress -name collector -log out/logs/collector-build.log -- go build -v -o .bin/otelcol-agentledger .
//
// For go build and go install it first runs go list -deps with the same
// build flags to learn how many packages the build has and how many are not
// in the build cache, then counts the packages done: those go build -v
// prints (compiled) and those the build's -debug-trace file shows finished
// (compiled or taken from the build cache, perhaps filled meanwhile by
// another build): "collector 1m20s: package 412 of 1700 (24%, 112 from the
// build cache), now go.opentelemetry.io/...; then link ...". For npm
// (run it with --loglevel http) it prints one line per step: metadata
// resolved, tarball downloaded, install script run. On a terminal the go
// line is redrawn every second; otherwise (CI, make -s > file) a line is
// printed every -every and at each phase. When the command fails, the last
// lines of its output that are not package names are printed, and
// buildprogress exits with the command's exit status.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.name, "name", "build", "what is built, the first word of every line")
	flag.StringVar(&o.log, "log", "", "file that receives the command's whole output (required)")
	flag.DurationVar(&o.every, "every", 15*time.Second, "interval between progress lines when the output is not a terminal")
	flag.StringVar(&o.mode, "mode", "auto", "go, npm or auto (go for `go build|install`, npm for npm)")
	tty := flag.String("tty", "auto", "redraw one line: on, off or auto (when stdout is a terminal)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: buildprogress -name NAME -log FILE [flags] -- command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.cmd = flag.Args()
	if o.log == "" || len(o.cmd) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	switch *tty {
	case "on":
		o.tty = true
	case "auto":
		if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
			o.tty = true
		}
	}
	if err := run(o, os.Stdout); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() > 0 {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "buildprogress:", err)
		os.Exit(1)
	}
}

type options struct {
	name  string
	log   string
	every time.Duration
	mode  string
	tty   bool
	cmd   []string
	// tick, when set, replaces the ticker (tests send on it).
	tick <-chan time.Time
	// now, when set, replaces time.Now (tests).
	now func() time.Time
}

// printer writes whole lines, or on a terminal also one line it redraws.
type printer struct {
	w     io.Writer
	tty   bool
	drawn bool
}

func (p *printer) show(s string) {
	if !p.tty {
		fmt.Fprintln(p.w, s)
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K"+fit(s))
	p.drawn = true
}

func (p *printer) println(s string) {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
	fmt.Fprintln(p.w, s)
}

// fit cuts a redrawn line to the terminal's width (COLUMNS, else 120) so
// that it does not wrap.
func fit(s string) string {
	width := 120
	if c, err := fmt.Sscan(os.Getenv("COLUMNS"), &width); c != 1 || err != nil || width < 20 {
		width = 120
	}
	if len(s) >= width {
		return s[:width-1]
	}
	return s
}

func run(o options, w io.Writer) error {
	if o.now == nil {
		o.now = time.Now
	}
	if o.tick == nil {
		every := o.every
		if o.tty {
			every = time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		o.tick = t.C
	}
	if err := os.MkdirAll(filepath.Dir(o.log), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(o.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	mode := o.mode
	if mode == "auto" {
		mode = detectMode(o.cmd)
	}
	p := &printer{w: w, tty: o.tty}
	p.println(fmt.Sprintf("%s: %s (full output: %s)", o.name, strings.Join(o.cmd, " "), o.log))
	switch mode {
	case "go":
		return runGo(o, p, logf)
	case "npm":
		return runNPM(o, p, logf)
	default:
		return runPlain(o, p, logf)
	}
}

func detectMode(cmd []string) string {
	base := filepath.Base(cmd[0])
	switch {
	case strings.HasPrefix(base, "go") && len(cmd) > 1 && (cmd[1] == "build" || cmd[1] == "install"):
		return "go"
	case base == "npm":
		return "npm"
	}
	return "plain"
}

// valueFlags are the go build flags that take the next argument as their
// value when not written -flag=value.
var valueFlags = map[string]bool{
	"-o": true, "-p": true, "-C": true, "-ldflags": true, "-gcflags": true, "-asmflags": true,
	"-gccgoflags": true, "-tags": true, "-mod": true, "-modfile": true, "-pkgdir": true,
	"-buildmode": true, "-compiler": true, "-installsuffix": true, "-overlay": true,
	"-pgo": true, "-toolexec": true, "-covermode": true, "-coverpkg": true, "-reldir": true,
}

// listArgs turns `go build|install [flags] [packages]` into the go list
// -deps command with the same build flags and packages, and says what comes
// after the compiles.
func listArgs(cmd []string) (args []string, then string) {
	args = []string{cmd[0], "list", "-deps", "-f", listFormat}
	var pkgs []string
	out := ""
	for i := 2; i < len(cmd); i++ {
		a := cmd[i]
		name, _, hasValue := strings.Cut(a, "=")
		switch {
		case a == "-v" || a == "-x" || a == "-n" || a == "-work" || a == "-a":
			// output and rebuild flags of build only
		case a == "-o" && i+1 < len(cmd):
			out = cmd[i+1]
			i++
		case name == "-o" && hasValue:
			out = strings.TrimPrefix(a, "-o=")
		case strings.HasPrefix(a, "-") && valueFlags[a] && i+1 < len(cmd):
			args = append(args, a, cmd[i+1])
			i++
		case strings.HasPrefix(a, "-"):
			args = append(args, a)
		default:
			pkgs = append(pkgs, a)
		}
	}
	args = append(args, pkgs...)
	switch {
	case out != "":
		then = "link " + out
	case cmd[1] == "install":
		then = "link and install " + strings.Join(pkgs, " ")
	default:
		then = "link"
	}
	return args, then
}

// stream runs cmd with its stdout and stderr (or only stderr, when stdout
// is set by the caller) delivered as lines.
func stream(cmd *exec.Cmd) (<-chan string, func() error, error) {
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	if cmd.Stdout == nil {
		cmd.Stdout = wr
	}
	cmd.Stderr = wr
	if err := cmd.Start(); err != nil {
		r.Close()
		wr.Close()
		return nil, nil, err
	}
	wr.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines, cmd.Wait, nil
}

// follow feeds every line to the log and to onLine, and calls onTick at
// each tick, until the output ends; then it waits for the command.
func follow(o options, cmd *exec.Cmd, log io.Writer, onLine func(string), onTick func()) error {
	fmt.Fprintf(log, "$ %s\n", strings.Join(cmd.Args, " "))
	lines, wait, err := stream(cmd)
	if err != nil {
		return err
	}
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return wait()
			}
			fmt.Fprintln(log, l)
			onLine(l)
		case <-o.tick:
			onTick()
		}
	}
}

// tail keeps the last n lines it is given.
type tail struct {
	n     int
	lines []string
}

func (t *tail) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[1:]
	}
}

func (t *tail) print(p *printer) {
	for _, l := range t.lines {
		p.println("  " + l)
	}
}

func runGo(o options, p *printer, log io.Writer) error {
	args, then := listArgs(o.cmd)
	t := newGoTracker(o.name, then, o.now())
	errs := &tail{n: 40}
	tick := func() { p.show(t.status(o.now())) }

	p.show(t.status(o.now()))
	list := exec.Command(args[0], args[1:]...)
	var listed strings.Builder
	list.Stdout = &listed
	listErr := follow(o, list, log, func(l string) {
		t.line(l)
		errs.add(l)
	}, tick)
	t.listed(parseList(listed.String()), listErr == nil)
	if listErr != nil {
		// The build reports the same problem with more context.
		fmt.Fprintf(log, "go list: %v\n", listErr)
	}
	errs.lines = nil
	p.println(t.status(o.now()))

	cmd := o.cmd
	var trace *traceReader
	if dir, err := os.MkdirTemp("", "buildprogress-"); err == nil {
		defer os.RemoveAll(dir)
		file := filepath.Join(dir, "trace.json")
		if traced, ok := withTrace(cmd, file); ok {
			cmd, trace = traced, &traceReader{path: file}
		}
	}
	readTrace := func() {
		if trace != nil {
			t.built(trace.poll())
		}
	}
	build := exec.Command(cmd[0], cmd[1:]...)
	err := follow(o, build, log, func(l string) {
		if t.line(l) {
			readTrace()
			p.println(t.status(o.now()))
		}
		if !isImportPath(l) {
			errs.add(l)
		}
	}, func() {
		readTrace()
		tick()
	})
	readTrace()
	if err != nil {
		p.println(fmt.Sprintf("%s: the last lines of output:", o.name))
		errs.print(p)
	}
	p.println(t.done(o.now(), o.log, err))
	return err
}

func runNPM(o options, p *printer, log io.Writer) error {
	t := newNPMTracker(o.name, o.now())
	errs := &tail{n: 40}
	quiet := 0
	cmd := exec.Command(o.cmd[0], o.cmd[1:]...)
	err := follow(o, cmd, log, func(l string) {
		errs.add(l)
		if s := t.line(l, o.now()); s != "" {
			quiet = 0
			p.println(s)
		}
	}, func() {
		// Speak up when npm has said nothing for a whole tick (on a
		// terminal the ticker runs every second: 15 of them).
		quiet++
		if (!o.tty && quiet > 0) || quiet%15 == 0 {
			p.show(t.idle(o.now()))
		}
	})
	if err != nil {
		p.println(fmt.Sprintf("%s: the last lines of output:", o.name))
		errs.print(p)
	}
	p.println(t.done(o.now(), o.log, err))
	return err
}

// runPlain shows elapsed time and the count of output lines.
func runPlain(o options, p *printer, log io.Writer) error {
	start := o.now()
	n := 0
	errs := &tail{n: 40}
	cmd := exec.Command(o.cmd[0], o.cmd[1:]...)
	err := follow(o, cmd, log, func(l string) { n++; errs.add(l) }, func() {
		p.show(fmt.Sprintf("%s %s: %d lines of output", o.name, elapsed(o.now().Sub(start)), n))
	})
	if err != nil {
		p.println(fmt.Sprintf("%s: the last lines of output:", o.name))
		errs.print(p)
		p.println(fmt.Sprintf("%s: FAILED after %s (%v); full output in %s", o.name, elapsed(o.now().Sub(start)), err, o.log))
		return err
	}
	p.println(fmt.Sprintf("%s: done in %s; full output in %s", o.name, elapsed(o.now().Sub(start)), o.log))
	return nil
}
