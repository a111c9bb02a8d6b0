package otelopencode

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// testWireCompaction: a compaction (POST /session/:id/summarize, sent
// here past the Client) after the prompt's invocation ended is a model
// request on the wire: counted, as the unattributed turn of a message the
// Client did not send (UnattributedOtherPrompt), never lost.
func testWireCompaction(t *testing.T, s *server) {
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		if tools, _ := q.Body["tools"].([]any); len(tools) == 0 {
			return "summary", scriptedmodel.Step{Text: "the summary"}
		}
		return "answer", scriptedmodel.Step{Text: "answered"}
	})
	sess := s.session(t, "compaction")
	res := s.prompt(t, sess, "COMPACT me later")
	sum := s.wait(t, res.InvocationID)
	checkUsage(t, "prompt", sum, s.model.sum("answer"))
	body := []byte(`{"providerID":"scripted","modelID":"scripted-model"}`)
	resp, err := http.Post(s.url+"/session/"+sess+"/summarize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("summarize: %d %s", resp.StatusCode, out)
	}
	// The turn's root ends when the Client reads the session's idle.
	deadline := time.Now().Add(60 * time.Second)
	for {
		for reason, roots := range unattributedRoots(s.p) {
			for _, r := range roots {
				if attr(r, contract.AttrConversationID).AsString() != sess {
					continue
				}
				u := s.wait(t, attr(r, contract.AttrInvocationID).AsString())
				if reason != UnattributedOtherPrompt || u.Status != contract.StatusIncomplete {
					t.Errorf("compaction turn: %s %s %v", reason, u.Status, u.Reasons)
				}
				checkUsage(t, "compaction turn", u, s.model.sum("summary"))
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no unattributed turn for the compaction; calls %v", s.model.labels())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
