package otelopencode

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// idSource makes OpenCode message ids that sort after the ids OpenCode
// made before: "msg_", 12 hex digits of (milliseconds*4096 + counter)
// modulo 2^48, and 14 random base62 characters, as OpenCode's own
// ascending ids. A prompt's id must sort after the session's earlier
// messages, since OpenCode orders messages by id.
type idSource struct {
	// mu guards lastMS, counter, used and usedOrder.
	mu      sync.Mutex
	lastMS  int64
	counter int64
	// used are the message ids made invocation ids
	// (WithMessageInvocationIDs), the latest maxUsedIDs in usedOrder.
	used      map[string]struct{}
	usedOrder []string
}

// maxUsedIDs bounds the message ids an idSource remembers.
const maxUsedIDs = 4096

// fresh reports whether id was not made an invocation id before, and
// remembers it.
func (s *idSource) fresh(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used == nil {
		s.used = make(map[string]struct{})
	}
	if _, ok := s.used[id]; ok {
		return false
	}
	s.used[id] = struct{}{}
	s.usedOrder = append(s.usedOrder, id)
	if len(s.usedOrder) > maxUsedIDs {
		delete(s.used, s.usedOrder[0])
		s.usedOrder = s.usedOrder[1:]
	}
	return true
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// next returns a new id for now that sorts after the id after (when given
// and OpenCode's: a server clock ahead of ours must not put a prompt
// before the messages it follows).
func (s *idSource) next(now time.Time, after string) string {
	ms := now.UnixMilli()
	s.mu.Lock()
	if ms != s.lastMS {
		s.lastMS, s.counter = ms, 0
	}
	s.counter++
	v := (ms*0x1000 + s.counter) & (1<<48 - 1)
	s.mu.Unlock()
	if len(after) >= 16 && strings.HasPrefix(after, "msg_") {
		if prev, err := strconv.ParseInt(after[4:16], 16, 64); err == nil && prev >= v {
			v = (prev + 1) & (1<<48 - 1)
		}
	}
	var rnd [14]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	for i, b := range rnd {
		rnd[i] = base62[int(b)%len(base62)]
	}
	return fmt.Sprintf("msg_%012x%s", v, rnd[:])
}
