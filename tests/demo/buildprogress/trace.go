package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
)

// go build -v prints a package only when it compiles it; a package found in
// the build cache (compiled earlier, or meanwhile by another build sharing
// the cache) is silent. The build's -debug-trace file, written as the build
// runs, ends one "Executing action (build <package>)" span per package
// either way, so buildprogress asks for one and counts those ends as done.
// The flag is the go command's debugging aid, not a stable interface: when
// the file holds no such events the count falls back to the printed
// packages.

// traceFlag is the go build flag that names the trace file.
const traceFlag = "-debug-trace"

// buildActionPrefix starts the name of a package's build action span.
const buildActionPrefix = "Executing action (build "

// withTrace returns cmd (go build|install ...) with -debug-trace=file
// added after the subcommand, or cmd unchanged when it names a trace file
// already (ok false: the caller's file is left alone).
func withTrace(cmd []string, file string) (out []string, ok bool) {
	if slices.ContainsFunc(cmd, func(a string) bool {
		name, _, _ := strings.Cut(a, "=")
		return name == traceFlag || name == "-"+traceFlag
	}) {
		return cmd, false
	}
	out = append(out, cmd[:2]...)
	out = append(out, traceFlag+"="+file)
	return append(out, cmd[2:]...), true
}

// traceReader reads a trace file as the go command appends to it, one
// JSON event a line (after "[" or ","), and returns the packages whose
// build action ended since the last read.
type traceReader struct {
	path    string
	offset  int64
	partial []byte
}

// poll returns the import paths of the build actions that ended since the
// last call. A missing file (the build has not opened it yet) is no error.
func (r *traceReader) poll() []string {
	f, err := os.Open(r.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(r.offset, io.SeekStart); err != nil {
		return nil
	}
	data, err := io.ReadAll(f)
	r.offset += int64(len(data))
	if err != nil && len(data) == 0 {
		return nil
	}
	data = append(r.partial, data...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		r.partial = data
		return nil
	}
	r.partial = append([]byte(nil), data[last+1:]...)
	var pkgs []string
	for _, line := range bytes.Split(data[:last], []byte("\n")) {
		if pkg, ok := builtPackage(line); ok {
			pkgs = append(pkgs, pkg)
		}
	}
	return pkgs
}

// builtPackage reads one trace line: the package of a build action's end
// event, if it is one.
func builtPackage(line []byte) (string, bool) {
	line = bytes.TrimLeft(line, "[,")
	if !bytes.Contains(line, []byte(buildActionPrefix)) {
		return "", false
	}
	var ev struct {
		Name  string `json:"name"`
		Phase string `json:"ph"`
	}
	if json.Unmarshal(line, &ev) != nil || ev.Phase != "E" {
		return "", false
	}
	pkg, ok := strings.CutPrefix(ev.Name, buildActionPrefix)
	// "build check cache <package>" precedes a package's build action.
	if !ok || !strings.HasSuffix(pkg, ")") || strings.HasPrefix(pkg, "check cache ") || strings.Contains(pkg, " -> ") {
		return "", false
	}
	return strings.TrimSuffix(pkg, ")"), true
}
