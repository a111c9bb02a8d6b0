package genaicall

import (
	"testing"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

func TestMain(m *testing.M) { genaitest.VerifyTestMain(m) }
