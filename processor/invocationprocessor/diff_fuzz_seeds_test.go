package invocationprocessor

// Scenario pieces for FuzzDifferential's seeds. Counts are n+1 (0 is
// absent), as in dfSpan.

func dfRoot(inv, trace, id, children byte) dfSpan {
	return dfSpan{Inv: inv, Trace: trace, ID: id, Role: 1, Children: children + 1, Dur: 5}
}

func dfChat(inv, trace, id, parent, in byte) dfSpan {
	return dfSpan{Inv: inv, Trace: trace, ID: id, Parent: parent, Op: 1, Children: 1, In: in, Out: 1, Start: 1}
}

func dfTool(inv, trace, id, parent, children byte) dfSpan {
	return dfSpan{Inv: inv, Trace: trace, ID: id, Parent: parent, Op: 2, Children: children + 1, Start: 2}
}

func dfJob(inv, trace, id, parent, followups byte) dfSpan {
	return dfSpan{Inv: inv, Trace: trace, ID: id, Parent: parent, Role: 2, Children: 1, Followups: followups + 1, Start: 2, Dur: 4}
}

func dfCont(inv, trace, id, children byte, links ...dfLink) dfSpan {
	s := dfSpan{Inv: inv, Trace: trace, ID: id, Role: 3, Children: children + 1, Start: 6, Dur: 1}
	copy(s.Links[:], links)
	return s
}

// dfCanonical is the canonical invocation: a root with a model call and a
// shell tool whose background job wakes a continuation with one more call.
func dfCanonical(inv byte) []dfSpan {
	return []dfSpan{
		dfRoot(inv, 1, 1, 2), dfChat(inv, 1, 2, 1, 100), dfTool(inv, 1, 3, 1, 1), dfJob(inv, 1, 4, 3, 1),
		dfCont(inv, 2, 10, 1, dfLink{Kind: dfLinkFollowup, Target: 4}), dfChat(inv, 2, 11, 10, 50),
	}
}

// dfClosed is a followup_closed span with reason (1 interrupted, 2
// abandoned, 3 consumed_by) closing job's followup.
func dfClosed(inv, trace, id, job, reason byte) dfSpan {
	return dfSpan{Inv: inv, Trace: trace, ID: id, Role: 4, Reason: reason, Children: 1, Start: 6,
		Links: [2]dfLink{{Kind: dfLinkFollowup, Target: job}}}
}

// dfMismatch returns s with invocation.usage.mismatch of the given code
// (1 true, 2 false, 3 "true", 5 true twice; see the format).
func dfMismatch(s dfSpan, code byte) dfSpan {
	s.Mismatch = code
	return s
}

// dfSeed is a named seed scenario.
type dfSeed struct {
	name string
	s    *dfScenario
}

func (s dfSeed) bytes() []byte { return s.s.bytes() }

// dfSeeds are the seed scenarios. Seeds 6-10 are the known findings 1-5;
// testdata/fuzz/FuzzDifferential holds the reproducers the fuzzer found
// (v06_r3_unrecorded, v06_r4_missing_detached). All of them fail until
// the processor implements agentledger v0.6.
func dfSeeds() []dfSeed {
	c := dfCanonical(0)
	seeds := []dfSeed{
		{"canonical in one batch", newDfScenario(0, 0).span(c...).flush()},
		{"canonical, graceful restart", newDfScenario(0, 0).span(c[:3]...).restart(dfGraceful).span(c[3:]...).advance(4)},
		{"canonical, crash after ack", newDfScenario(0, 0).span(c[:4]...).restart(dfCrashAcked).span(c[4:]...).flush()},
		{"canonical, lost ack", newDfScenario(0, 0).span(c[:2]...).restart(dfCrashLostAck).span(c[2:]...).restart(dfCrashLostAck)},
		{"canonical, crash mid-batch", newDfScenario(0, 0).span(c[:5]...).restart(dfCrashMidBatch).span(c[5]).restart(dfCrashMidBatch).resend(0)},
		{"two invocations interleaved, remote tool", newDfScenario(0, 0).
			span(dfRoot(1, 3, 5, 1), c[0], c[1]).flush().
			span(dfSpan{Inv: 1, Trace: 3, ID: 6, Parent: 5, Op: 2, Children: 1, Remote: true}).advance(2).
			span(c[2], c[3], dfChat(1, 3, 7, 6, 9)).restart(dfCrashAcked).span(c[4], c[5]).advance(5)},

		// Finding 1: a root sends invocation.children twice (2, then 1) and
		// a chat span gen_ai.usage.input_tokens twice (100, then 5); a
		// graceful restart with storage. Never final: not with 5 tokens,
		// not without a second child (v0.6 rules 1, 7). FAILS on difffuzz
		// at 90c9d67: final with 5 tokens after the restart (the journal
		// keeps the last reading, the live path the first), which is also
		// a crash-equivalence difference.
		{"finding 1: repeated children and usage across a restart", newDfScenario(0, 0).span(
			dfSpan{Inv: 0, Trace: 1, ID: 1, Role: 1, Children: 2 + 1, Dur: 5, Muts: [2]dfMut{{Key: 3, Kind: dfRepeatOther, Val: 1}}},
			dfSpan{Inv: 0, Trace: 1, ID: 2, Parent: 1, Op: 1, Children: 1, In: 100, Out: 1, Start: 1, Muts: [2]dfMut{{Key: 12, Kind: dfRepeatOther, Val: 5}}},
		).restart(dfGraceful).advance(8)},

		// Finding 2: a continuation whose followup link has the job's span
		// ID but another trace ID. Never final (v0.6 rule 2). FAILS on
		// difffuzz at 90c9d67: final.
		{"finding 2: followup link to the job's span ID in another trace", newDfScenario(0, 0).
			span(dfRoot(0, 1, 1, 1), dfTool(0, 1, 2, 1, 1), dfJob(0, 1, 3, 2, 1)).flush().
			span(dfCont(0, 2, 10, 0, dfLink{Kind: dfLinkFollowup, Target: 3, Other: true})).advance(8)},

		// Finding 3: a background span whose invocation.role is the array
		// ["background"], with invocation.followups 1; the followup never
		// arrives. Never final (v0.6 rule 1). FAILS on difffuzz at
		// 90c9d67: final.
		{"finding 3: role as an array, followup never arrives", newDfScenario(0, 0).span(
			dfRoot(0, 1, 1, 1),
			dfSpan{Inv: 0, Trace: 1, ID: 2, Parent: 1, Role: 2, Children: 1, Followups: 1 + 1, Start: 2, Dur: 4, Muts: [2]dfMut{{Key: 2, Kind: dfSetSlice}}},
		).advance(8)},

		// Finding 4: max_open_invocations 3; X (p) is final, five more
		// close, then the exporter retries X's batch. No second revision 1
		// (v0.6 rule 6). FAILS on difffuzz at 90c9d67: p is forgotten
		// and reopened, a second final revision 1.
		{"finding 4: retried batch after X was forgotten", newDfScenario(0, 1).
			span(dfRoot(0, 1, 1, 0)).flush().
			span(dfRoot(1, 2, 2, 0)).flush().span(dfRoot(2, 3, 3, 0)).flush().span(dfRoot(3, 4, 4, 0)).flush().
			span(dfRoot(4, 1, 5, 0)).flush().span(dfRoot(5, 2, 6, 0)).flush().
			resend(0)},

		// Finding 5: one span with 3000 followup links to spans that never
		// arrive, under max_spans_per_invocation 1000. Not final, state
		// bounded (v0.6 rule 5). FAILS on difffuzz at 90c9d67: final, and
		// the invocation holds 3000 span entries.
		{"finding 5: 3000 link targets beyond the span bound", newDfScenario(0, 0).span(
			dfRoot(0, 1, 1, 1),
			dfSpan{Inv: 0, Trace: 1, ID: 2, Parent: 1, Children: 1, Start: 1, Fan: 2, Links: [2]dfLink{{Kind: dfLinkFollowup, Target: 5}}},
		).advance(8)},

		// v0.6 rule 2 (found by FuzzLedgerDifferential): a detached_from
		// link naming a member's span ID in another trace, the member
		// declaring no invocation.detached, in either order. Never final.
		{"detached_from link to an undeclared span in another trace, link first", newDfScenario(0, 0).
			span(dfSpan{Inv: 0, Trace: 1, ID: 2, Role: 1, Children: 1, Links: [2]dfLink{{Kind: dfLinkDetached, Target: 1, Other: true}}}).flush().
			span(dfSpan{Inv: 0, Trace: 1, ID: 1, Children: 1, Parent: 6}).flush()},
		{"detached_from link to an undeclared span in another trace, span first", newDfScenario(0, 0).
			span(dfSpan{Inv: 0, Trace: 1, ID: 1, Children: 1, Parent: 6}).flush().
			span(dfSpan{Inv: 0, Trace: 1, ID: 2, Role: 1, Children: 1, Links: [2]dfLink{{Kind: dfLinkDetached, Target: 1, Other: true}}}).flush()},

		// CONTRACT.md v0.7: a job closed interrupted is named on the final
		// summary, whether its span or the closing span comes first, and
		// across a restart.
		{"job closed interrupted", newDfScenario(0, 0).span(c[:4]...).flush().span(dfClosed(0, 3, 12, 4, 1)).flush()},
		{"job closed interrupted, closer first, crash after ack", newDfScenario(0, 0).
			span(dfClosed(0, 3, 12, 4, 1), c[0]).restart(dfCrashAcked).span(c[1:4]...).advance(4)},
		{"job closed consumed_by: no job named", newDfScenario(0, 0).span(c[:4]...).span(dfClosed(0, 3, 12, 4, 3)).flush()},

		// CONTRACT.md v0.8: a turn whose runtime reported other usage is
		// named, the root and the continuation, across a crash; false
		// names nothing; a string is malformed.
		{"usage mismatch on root and continuation, crash after ack", newDfScenario(0, 0).
			span(dfMismatch(c[0], 1), c[1], c[2], c[3]).restart(dfCrashAcked).span(dfMismatch(c[4], 5), c[5]).flush()},
		{"usage mismatch false", newDfScenario(0, 0).span(dfMismatch(c[0], 2)).span(c[1:]...).flush()},
		{"usage mismatch malformed", newDfScenario(0, 0).span(dfMismatch(c[0], 3)).span(c[1:]...).flush().advance(8)},

		// Issue 34: what the rule does not read survives restarts too.
		// Values 17 deep in the resource and a stored span attribute,
		// across a crash after ack and a compaction; at the limit; beyond
		// it (refused whole in both runs, then the batch comes without
		// it); not stored at any depth; scopes of every kind.
		{"17 deep in resource and gen_ai attribute, crash after ack", newDfScenario(0, 0).
			span(dfCtx(c[0], 0, 2, 0), dfCtx(c[1], 1, 2, 0), c[2], c[3]).restart(dfCrashAcked).span(c[4:]...).restart(dfGraceful).advance(4)},
		{"at the limit, crash mid-batch and lost ack", newDfScenario(0, 0).
			span(dfCtx(c[0], 2, 3, 1), dfCtx(c[1], 2, 3, 1), c[2]).restart(dfCrashMidBatch).span(c[3:]...).restart(dfCrashLostAck).flush()},
		{"beyond the limit refused, then sent without it", newDfScenario(0, 0).
			span(dfCtx(c[0], 7, 0, 0), c[1]).flush().span(c[0], dfCtx(c[1], 0, 6, 0)).flush().span(c...).restart(dfCrashAcked).flush()},
		{"not stored at any depth, repeats, every type, every scope", newDfScenario(0, 0).
			span(dfCtx(c[0], 3, 4, 2), dfCtx(c[1], 4, 5, 3), dfCtx(c[2], 5, 7, 1), dfCtx(c[3], 6, 1, 0)).restart(dfCrashAcked).
			span(c[4:]...).restart(dfGraceful).flush()},
	}
	return seeds
}

// dfCtx returns s with a non-rule attribute, a resource and a scope (see
// diff_fuzz_context_test.go).
func dfCtx(s dfSpan, extra, res, scope byte) dfSpan {
	s.Extra, s.Res, s.Scope = extra, res, scope
	return s
}
