package genaicall

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unicode/utf8"
)

// Field is one member of a JSON object, as it stands in the object's
// bytes: nothing is decoded or copied.
type Field struct {
	// Key is the member's name with its quotes, still escaped.
	Key []byte
	// Value is the member's value without the whitespace around it.
	Value []byte
	// At is where Value starts in the object's bytes.
	At int
}

// Is reports whether f's name is name: exactly, or, with fold, as
// encoding/json matches a struct field (case-insensitively).
func (f Field) Is(name string, fold bool) bool {
	key := f.Key[1 : len(f.Key)-1]
	// encoding/json unescapes a name and replaces the bytes that are not
	// UTF-8 before matching it.
	if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
		var s string
		if json.Unmarshal(f.Key, &s) != nil {
			return false
		}
		key = []byte(s)
	}
	if fold {
		return bytes.EqualFold(key, []byte(name))
	}
	return string(key) == name
}

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// ObjectFields appends the members of the JSON object b to dst. It
// reports whether b is exactly one JSON object, with whitespace around it
// allowed, in the syntax encoding/json accepts; when not, what it
// returns is not to be used. Values are checked but not decoded, so a
// large value costs one pass over its bytes and nothing else.
func ObjectFields(b []byte, dst []Field) ([]Field, bool) {
	s := objScanner{b: b}
	s.space()
	if s.i >= len(b) || b[s.i] != '{' {
		return dst, false
	}
	dst, ok := s.object(1, dst, true)
	if !ok {
		return dst, false
	}
	s.space()
	return dst, s.i == len(b)
}

// objScanner checks JSON syntax from b[i] on.
type objScanner struct {
	b []byte
	i int
}

func (s *objScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object reads the object at b[i] == '{', appending its members to dst
// when keep.
func (s *objScanner) object(depth int, dst []Field, keep bool) ([]Field, bool) {
	if depth > maxDepth {
		return dst, false
	}
	s.i++ // '{'
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return dst, true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return dst, false
		}
		k := s.i
		if !s.str() {
			return dst, false
		}
		key := s.b[k:s.i]
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return dst, false
		}
		s.i++
		s.space()
		v := s.i
		if !s.value(depth) {
			return dst, false
		}
		if keep {
			dst = append(dst, Field{Key: key, Value: s.b[v:s.i:s.i], At: v})
		}
		s.space()
		if s.i >= len(s.b) {
			return dst, false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			return dst, true
		default:
			return dst, false
		}
	}
}

func (s *objScanner) array(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.i++ // '['
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.space()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// value reads the value at b[i], which is not whitespace.
func (s *objScanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		_, ok := s.object(depth+1, nil, false)
		return ok
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		return s.str()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	}
	return false
}

func (s *objScanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

// str reads the string at b[i] == '"'. Like encoding/json, it accepts
// bytes that are not UTF-8.
func (s *objScanner) str() bool {
	b := s.b
	i := s.i + 1
	for i < len(b) {
		// Eight bytes at a time while none is a quote, a backslash or a
		// control character: a conversation is mostly long strings.
		for ; i+8 <= len(b); i += 8 {
			w := binary.LittleEndian.Uint64(b[i:])
			if hasLess(w, 0x20) || hasZero(w^(lsb*'"')) || hasZero(w^(lsb*'\\')) {
				break
			}
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			i++
		}
	}
	return false
}

// lsb has the low bit of each byte set.
const lsb = 0x0101010101010101

// hasZero reports whether a byte of w is zero.
func hasZero(w uint64) bool { return (w-lsb)&^w&(lsb*0x80) != 0 }

// hasLess reports whether a byte of w is less than n, for n <= 128.
func hasLess(w uint64, n uint64) bool { return (w-lsb*n)&^w&(lsb*0x80) != 0 }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (s *objScanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	s.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// Member names a top-level member of a request body and where
// DecodeMembers puts its value: a *json.RawMessage gets the value's bytes
// (a slice of the body, not a copy), any other pointer the value decoded
// into it.
type Member struct {
	Name string
	Dst  any
}

// DecodeMembers sets the members' destinations from fields as
// json.Unmarshal would set a struct's: names matched case-insensitively,
// the last of duplicates kept, a value of the wrong type left out. It is
// the one reader of the wrappers' request parameters.
func DecodeMembers(fields []Field, members ...Member) {
	for _, f := range fields {
		for _, m := range members {
			if !f.Is(m.Name, true) {
				continue
			}
			if raw, ok := m.Dst.(*json.RawMessage); ok {
				*raw = f.Value
			} else {
				_ = json.Unmarshal(f.Value, m.Dst)
			}
			break
		}
	}
}
