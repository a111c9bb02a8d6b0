package genaitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// conversationTurn is one turn of a coding agent's conversation: a tool
// result with source code (quotes, tabs and newlines to escape) and the
// assistant's answer.
const conversationTurn = "func (s *Server) next(w http.ResponseWriter, hr *http.Request) (Request, Step, bool) {\n" +
	"\traw, err := io.ReadAll(hr.Body)\n\tif err != nil {\n\t\thttp.Error(w, err.Error(), http.StatusBadRequest)\n" +
	"\t\treturn Request{}, Step{}, false\n\t}\n\tr := Request{Method: hr.Method, Path: hr.URL.Path, \"Raw\": raw}\n}\n"

// Conversation returns alternating user and assistant texts of about kb
// kilobytes in all, as they stand in a long agent session.
func Conversation(kb int) []string {
	var turns []string
	for size := 0; size < kb<<10; {
		text := fmt.Sprintf("turn %d: %s", len(turns), strings.Repeat(conversationTurn, 4))
		turns = append(turns, text)
		size += len(text)
	}
	return turns
}

// CannedServer answers every request with the response the scripted
// model gives to a small request of the same kind (path and body), after
// reading and dropping the request's body: unlike the scripted model, it
// neither parses nor keeps the large bodies the benchmark sends, so that
// what differs between the modes is the client side.
func CannedServer(b *testing.B, path, body string) *httptest.Server {
	b.Helper()
	model := BenchServer("call_b", "shell", `{"cmd":"go test ./..."}`)
	defer model.Close()
	rec := httptest.NewRecorder()
	model.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		b.Fatalf("scripted model answered %d: %s", rec.Code, rec.Body)
	}
	answer, contentType := rec.Body.Bytes(), rec.Header().Get("Content-Type")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(answer)
	}))
	b.Cleanup(srv.Close)
	return srv
}
