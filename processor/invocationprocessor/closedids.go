package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

// closedIDs remembers a shard's invocations whose full record was
// forgotten before their retention ended (the bound on retained
// invocations), so that a late or retried span of one is passed on
// without opening a second invocation and a second revision 1 (CONTRACT
// v0.6 rule 6). Each id is kept as a 64-bit fingerprint with the end of
// its retention: 16 bytes in a FIFO ring, plus 4 to 8 bytes of index
// slot. max_closed_invocations bounds them across shards (bounds.go).
//
// Two ids with the same fingerprint (about 1 in 2^64 per pair) would make
// the later one's spans pass unindexed within the earlier one's
// retention: a lost summary, never a wrong one.
type closedIDs struct {
	// ring holds n entries from head on, oldest first.
	ring    []closedID
	head, n int
	// index is an open-addressing table (linear probing) of ring
	// positions + 1; 0 is an empty slot. Its length is a power of two at
	// least twice n.
	index []uint32
}

// closedID is one remembered id.
type closedID struct {
	fp    uint64
	until int64 // end of retention, processor clock (Unix ns)
}

// fingerprint hashes a ledger key (tenant and invocation id): FNV-1a with
// a final mix, so that the low bits index the table well. It is stable
// across processes: fingerprints are rebuilt from the journal.
func fingerprint(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// slotOf returns the index slot holding ring position pos+1 for fp, or
// the empty slot where it would go, and whether it was found.
func (c *closedIDs) find(fp uint64) (slot int, found bool) {
	mask := len(c.index) - 1
	for i := int(fp) & mask; ; i = (i + 1) & mask {
		v := c.index[i]
		if v == 0 {
			return i, false
		}
		if c.ring[v-1].fp == fp {
			return i, true
		}
	}
}

// remembered reports whether the fingerprint is held and its retention
// has not ended at now.
func (c *closedIDs) remembered(fp uint64, now int64) bool {
	if c.n == 0 {
		return false
	}
	slot, ok := c.find(fp)
	return ok && c.ring[c.index[slot]-1].until > now
}

// add remembers fp until the given time; it reports whether an entry was
// added (false when fp was held already: its time is extended).
func (c *closedIDs) add(fp uint64, until int64) bool {
	if c.n > 0 {
		if slot, ok := c.find(fp); ok {
			e := &c.ring[c.index[slot]-1]
			e.until = max(e.until, until)
			return false
		}
	}
	if c.n == len(c.ring) {
		c.grow()
	}
	pos := (c.head + c.n) % len(c.ring)
	c.ring[pos] = closedID{fp: fp, until: until}
	c.n++
	slot, _ := c.find(fp)
	c.index[slot] = uint32(pos + 1)
	return true
}

// grow doubles the ring, putting its entries in order from 0, and
// rebuilds the index at twice its size.
func (c *closedIDs) grow() {
	size := max(16, 2*len(c.ring))
	ring := make([]closedID, size)
	for k := 0; k < c.n; k++ {
		ring[k] = c.ring[(c.head+k)%len(c.ring)]
	}
	c.ring, c.head = ring, 0
	c.index = make([]uint32, 2*size)
	for k := 0; k < c.n; k++ {
		slot, _ := c.find(c.ring[k].fp)
		c.index[slot] = uint32(k + 1)
	}
}

// oldest returns the retention end of the oldest entry.
func (c *closedIDs) oldest() (int64, bool) {
	if c.n == 0 {
		return 0, false
	}
	return c.ring[c.head].until, true
}

// dropOldest forgets the oldest entry.
func (c *closedIDs) dropOldest() {
	pos := c.head
	slot, _ := c.find(c.ring[pos].fp)
	c.unindex(slot)
	c.ring[pos] = closedID{}
	c.head = (c.head + 1) % len(c.ring)
	c.n--
	if c.n == 0 {
		// Release the memory of a burst once it has all expired.
		c.ring, c.index, c.head = nil, nil, 0
	}
}

// expire drops the entries from the oldest on whose retention ended at
// now, and returns how many it dropped. Entries are added in the order
// their records were forgotten, so an entry whose retention ends earlier
// than an older one's waits behind it (remembered checks the time).
func (c *closedIDs) expire(now int64) int {
	dropped := 0
	for c.n > 0 && c.ring[c.head].until <= now {
		c.dropOldest()
		dropped++
	}
	return dropped
}

// unindex empties an index slot, moving later entries of its probe run
// back so that every entry stays reachable from its home slot.
func (c *closedIDs) unindex(i int) {
	mask := len(c.index) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		v := c.index[j]
		if v == 0 {
			break
		}
		home := int(c.ring[v-1].fp) & mask
		// The entry at j stays when its home lies cyclically in (i, j].
		if (i < j && i < home && home <= j) || (i > j && (home > i || home <= j)) {
			continue
		}
		c.index[i] = v
		i = j
	}
	c.index[i] = 0
}
