package otelcodex

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// execMode is what a host's command line asks of Codex (Exec).
type execMode int

const (
	// modeOther: a subcommand Exec does not record (login, the TUI,
	// app-server's schema generators, ...): run unchanged.
	modeOther execMode = iota
	// modeExec: `codex exec` (or `e`), one turn.
	modeExec
	// modeAppServer: `codex app-server` over stdio.
	modeAppServer
)

// valueFlags are Codex's options that take a value as the next argument,
// so that the value is not read as the subcommand.
var valueFlags = map[string]bool{
	"-c": true, "--config": true, "-m": true, "--model": true, "-p": true, "--profile": true,
	"-C": true, "--cd": true, "-s": true, "--sandbox": true, "-a": true, "--ask-for-approval": true,
	"-i": true, "--image": true, "--enable": true, "--disable": true, "--local-provider": true,
	"--add-dir": true, "--output-schema": true, "--output-last-message": true, "-o": true,
	"--color": true, "--thread-source": true, "--cyber-access-program": true, "--listen": true,
}

// hostArgs is what Exec reads of a host's command line.
type hostArgs struct {
	mode execMode
	// insert is where Exec's own -c goes: before exec's resume (or
	// review) subcommand or a "--", else at the end, so that it is an
	// option of the subcommand given after the host's own.
	insert int
	// configs are the -c/--config options.
	configs []configArg
}

// configArg is one -c option: the argument at index i holds its
// key=value, after "--config=" or "-c" when inline.
type configArg struct {
	i      int
	inline bool
}

// readHostArgs reads the mode and the -c options of a command line.
func readHostArgs(args []string) hostArgs {
	h := hostArgs{insert: len(args)}
	sub := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if sub >= 0 && h.insert == len(args) {
				h.insert = i
			}
			break
		}
		if v, ok := configValue(args, i); ok {
			h.configs = append(h.configs, configArg{i: v, inline: v == i})
			i = v
			continue
		}
		if valueFlags[a] {
			i++
			continue
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		switch {
		case sub < 0:
			sub = i
			switch a {
			case "exec", "e":
				h.mode = modeExec
			case "app-server":
				h.mode = modeAppServer
			default:
				return hostArgs{mode: modeOther}
			}
		case h.mode == modeAppServer:
			// app-server's own subcommands (generate-json-schema, ...).
			return hostArgs{mode: modeOther}
		case h.mode == modeExec && (a == "resume" || a == "review") && h.insert == len(args):
			h.insert = i
		}
	}
	if sub < 0 {
		return hostArgs{mode: modeOther}
	}
	return h
}

// configValue returns the index of the value of the -c option at i: i+1
// for "-c k=v" and "--config k=v", i for "--config=k=v" and "-ck=v".
func configValue(args []string, i int) (int, bool) {
	switch a := args[i]; {
	case (a == "-c" || a == "--config") && i+1 < len(args):
		return i + 1, true
	case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-c") && len(a) > 2 && a[1] == 'c':
		return i, true
	}
	return 0, false
}

// configKV splits a -c value (at the index configValue returned) into its
// dotted key and TOML value; prefix is what precedes the key in the
// argument ("--config=", "-c" or "").
func configKV(arg string, inline bool) (prefix, key, value string, ok bool) {
	if inline {
		if strings.HasPrefix(arg, "--config=") {
			prefix = "--config="
		} else {
			prefix = "-c"
		}
		arg = arg[len(prefix):]
	}
	k, v, ok := strings.Cut(arg, "=")
	if !ok {
		return "", "", "", false
	}
	return prefix, strings.TrimSpace(k), strings.TrimSpace(v), true
}

// tomlString reads a TOML string value as Codex's -c does: a basic or
// literal string, else the text itself (Codex takes a value that is not
// TOML as a string).
func tomlString(v string) string {
	v = strings.TrimSpace(v)
	switch {
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
		if s, err := strconv.Unquote(v); err == nil {
			return s
		}
		return v[1 : len(v)-1]
	case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
		return v[1 : len(v)-1]
	}
	return v
}

// endpoint is the model endpoint a host's configuration gives Codex, and
// how to point it at the proxy instead.
type endpoint struct {
	// provider is the model_provider Codex uses ("openai", the built-in
	// one, when none is set).
	provider string
	// baseURL is its base URL; "" when nothing sets it.
	baseURL string
	// key is the -c key that sets it: openai_base_url for the built-in
	// provider, model_providers.<id>.base_url for the others.
	key string
}

// resolveEndpoint finds the model provider and base URL Codex will use:
// the last -c of the command line, else config.toml in codexHome (its
// top-level model_provider and openai_base_url, and the base_url of its
// [model_providers.<id>] tables; profiles are not read), else, for the
// built-in provider, OPENAI_BASE_URL in env.
func resolveEndpoint(args []string, h hostArgs, codexHome string, env func(string) string) endpoint {
	settings := map[string]string{}
	for _, c := range h.configs {
		if _, k, v, ok := configKV(args[c.i], c.inline); ok {
			settings[k] = tomlString(v)
		}
	}
	file := readConfigFile(filepath.Join(codexHome, "config.toml"))
	lookup := func(k string) string {
		if v, ok := settings[k]; ok {
			return v
		}
		return file[k]
	}
	e := endpoint{provider: lookup("model_provider")}
	if e.provider == "" {
		e.provider = "openai"
	}
	if e.provider == "openai" {
		e.key = "openai_base_url"
		if e.baseURL = lookup(e.key); e.baseURL == "" {
			e.baseURL = env("OPENAI_BASE_URL")
		}
		return e
	}
	e.key = "model_providers." + e.provider + ".base_url"
	e.baseURL = lookup(e.key)
	return e
}

// rewrite returns args with every -c that sets e's base URL set to
// proxyURL instead, and one more such -c at h.insert.
func (h hostArgs) rewrite(args []string, e endpoint, proxyURL string) []string {
	out := make([]string, 0, len(args)+2)
	out = append(out, args...)
	quoted := strconv.Quote(proxyURL)
	for _, c := range h.configs {
		if prefix, k, _, ok := configKV(args[c.i], c.inline); ok && k == e.key {
			out[c.i] = prefix + k + "=" + quoted
		}
	}
	return append(out[:h.insert:h.insert], append([]string{"-c", e.key + "=" + quoted}, out[h.insert:]...)...)
}

// maxConfigFile bounds the config.toml Exec reads.
const maxConfigFile = 1 << 20

// readConfigFile reads the few settings of a config.toml that name the
// model endpoint, as dotted keys: model_provider and openai_base_url at
// the top level, model_providers.<id>.base_url from the provider tables.
// It is no TOML parser: one key = "string" per line, no inline tables.
func readConfigFile(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxConfigFile))
	sc.Buffer(make([]byte, 64<<10), maxConfigFile)
	table := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			table = strings.Trim(strings.TrimSpace(strings.Trim(line, "[]")), `"`)
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k = strings.Trim(strings.TrimSpace(k), `"`)
		v = tomlString(withoutComment(strings.TrimSpace(v)))
		switch {
		case table == "" && (k == "model_provider" || k == "openai_base_url"):
			out[k] = v
		case strings.HasPrefix(table, "model_providers.") && k == "base_url":
			out[table+".base_url"] = v
		}
	}
	return out
}

// withoutComment returns a TOML value without the comment after it: up
// to the closing quote of a string, else up to a '#'.
func withoutComment(v string) string {
	switch {
	case strings.HasPrefix(v, `"`):
		for i := 1; i < len(v); i++ {
			switch v[i] {
			case '\\':
				i++
			case '"':
				return v[:i+1]
			}
		}
	case strings.HasPrefix(v, "'"):
		if i := strings.IndexByte(v[1:], '\''); i >= 0 {
			return v[:i+2]
		}
	default:
		if i := strings.IndexByte(v, '#'); i >= 0 {
			return strings.TrimSpace(v[:i])
		}
	}
	return v
}
