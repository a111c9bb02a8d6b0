package ledger

// maxInterned and maxInternedLen bound a ledger's nameTable: at most
// 4096 names of at most 128 bytes.
const (
	maxInterned    = 4096
	maxInternedLen = 128
)

// nameTable interns the span names a Ledger sees, which repeat ("chat
// gpt-4o", "execute_tool shell"): the invocations' Graphs then share one
// copy of each. It holds at most maxInterned names and never forgets one;
// beyond, a name is kept as the span gave it. The Ledger's mutex guards
// it.
type nameTable struct {
	names map[string]string
}

// intern returns the table's copy of name, adding it when there is room.
func (t *nameTable) intern(name string) string {
	if n, ok := t.names[name]; ok {
		return n
	}
	if len(t.names) >= maxInterned || len(name) > maxInternedLen {
		return name
	}
	if t.names == nil {
		t.names = make(map[string]string)
	}
	t.names[name] = name
	return name
}
