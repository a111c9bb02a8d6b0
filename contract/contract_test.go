package contract

import (
	"strings"
	"testing"
)

// TestOwnNamesOutsideGenAI checks that the names of our own attributes
// are not in the gen_ai namespace, which is the registry's.
func TestOwnNamesOutsideGenAI(t *testing.T) {
	for _, name := range []string{
		AttrInvocationID, AttrRole, AttrChildren, AttrFollowups, AttrRemote,
		AttrLink, AttrFollowupReason, AttrFollowupConsumer, AttrLateChild,
		AttrUnattributed, AttrUnrecorded, AttrDetached, AttrUsageMismatch, AttrTenant, AttrSummaryCollector,
		AttrResponseToolCalls, AttrResponseStreamClosedEarly, AttrResponseEnding,
		AttrStatus, AttrIncompleteReasons, AttrAnomalies, AttrRevision,
		AttrAfterResultInput, AttrAfterResultOutput, AttrModelCalls,
		AttrBackgroundJobs, AttrContinuations, AttrSpans, AttrTraces,
		AttrDuplicateSpans, AttrTimeToFinalMS, AttrCost, AttrCostCurrency,
	} {
		if !strings.HasPrefix(name, "invocation.") {
			t.Errorf("%q is not in the invocation namespace", name)
		}
	}
}
