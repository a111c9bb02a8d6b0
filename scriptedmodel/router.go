package scriptedmodel

import (
	"fmt"
	"sync"
)

// Rule answers the requests it matches. Rules route a conversation by its
// content, so a script keeps working whatever order the requests of
// concurrent turns arrive in.
type Rule struct {
	// Name labels the requests the rule answered (Router.Answered).
	Name string
	// Match reports whether the rule answers r; nil matches every request.
	Match func(r Request) bool
	// Answer returns the step; its Usage is replaced by the Router's.
	Answer func(r Request) Step
	// Hold, when set, is called before Answer and may block, to keep the
	// request streaming until the test lets it go.
	Hold func(r Request)
}

// Answered is one request a Router answered.
type Answered struct {
	Seq  int
	Rule string
	// Usage is the usage the answer reported (GenAI sense).
	Usage Usage
	// Text is the request's NewText.
	Text string
}

// Router is a Responder made of rules: the first rule that matches a
// request answers it, with the usage the Router's usage function gives the
// request's sequence number, so that every request reports a distinct,
// known usage. Requests no rule matches get a plain text answer labelled
// "unrouted". Its methods are safe for concurrent use.
type Router struct {
	usage func(seq int) Usage

	// mu guards rules, generation, answered and waiters.
	mu    sync.Mutex
	rules []Rule
	// generation counts SetRules calls: an answer decided under earlier
	// rules (a held request released after the rules changed) is not
	// recorded among the new rules' answers.
	generation int
	answered   []Answered
	waiters    []waiter
}

type waiter struct {
	rule string
	ch   chan struct{}
}

// NewRouter returns a Router whose answers report usage(seq).
func NewRouter(usage func(seq int) Usage, rules ...Rule) *Router {
	return &Router{usage: usage, rules: rules}
}

// SetRules replaces the rules and forgets the requests answered so far;
// requests still being answered under the old rules are not recorded.
func (rt *Router) SetRules(rules ...Rule) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.rules, rt.answered = rules, nil
	rt.generation++
}

// Respond answers r; pass it as Options.Responder.
func (rt *Router) Respond(r Request) Step {
	rt.mu.Lock()
	rules, generation := rt.rules, rt.generation
	rt.mu.Unlock()
	rule := Rule{Name: "unrouted", Answer: func(Request) Step { return Step{Text: "unrouted"} }}
	for _, x := range rules {
		if x.Match == nil || x.Match(r) {
			rule = x
			break
		}
	}
	if rule.Hold != nil {
		rule.Hold(r)
	}
	st := rule.Answer(r)
	if st.Status < 400 {
		st.Usage = rt.usage(r.Seq)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if generation != rt.generation {
		return st
	}
	a := Answered{Seq: r.Seq, Rule: rule.Name, Text: r.NewText()}
	if st.Status < 400 && !st.OmitUsage {
		a.Usage = st.Usage
	}
	rt.answered = append(rt.answered, a)
	keep := rt.waiters[:0]
	for _, w := range rt.waiters {
		if w.rule == rule.Name {
			close(w.ch)
		} else {
			keep = append(keep, w)
		}
	}
	rt.waiters = keep
	return st
}

// Answered returns the requests answered since the rules were last set, in
// the order the answers were decided.
func (rt *Router) Answered() []Answered {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]Answered(nil), rt.answered...)
}

// Answering returns a channel closed once a rule named rule has answered a
// request (at once if one already has).
func (rt *Router) Answering(rule string) <-chan struct{} {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ch := make(chan struct{})
	for _, a := range rt.answered {
		if a.Rule == rule {
			close(ch)
			return ch
		}
	}
	rt.waiters = append(rt.waiters, waiter{rule: rule, ch: ch})
	return ch
}

// Sum returns the total usage and the number of requests answered by the
// rules named.
func (rt *Router) Sum(rules ...string) (Usage, int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var u Usage
	n := 0
	for _, a := range rt.answered {
		for _, name := range rules {
			if a.Rule == name {
				u.InputTokens += a.Usage.InputTokens
				u.OutputTokens += a.Usage.OutputTokens
				u.CacheReadTokens += a.Usage.CacheReadTokens
				u.CacheCreationTokens += a.Usage.CacheCreationTokens
				u.ReasoningTokens += a.Usage.ReasoningTokens
				n++
				break
			}
		}
	}
	return u, n
}

// Labels returns "seq:rule" for each request answered, for messages.
func (rt *Router) Labels() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]string, 0, len(rt.answered))
	for _, a := range rt.answered {
		out = append(out, fmt.Sprintf("%d:%s", a.Seq, a.Rule))
	}
	return out
}
