package journal // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
)

// Version is the first byte of every stored value written. Version 2
// added EvClosed; a value of version 1 is read as before, one of any
// other version is not read (it is counted and reported like corrupt
// data).
const (
	Version   byte = 2
	VersionV1 byte = 1
)

// readableVersion reports whether a stored value of version v is read.
func readableVersion(v byte) bool { return v == Version || v == VersionV1 }

// Kinds of stored values (the second byte).
const (
	KindLog      byte = 'L' // one operation of a partition's log
	KindChunk    byte = 'C' // part of a partition's snapshot: many operations
	KindManifest byte = 'M' // where a partition's snapshot and log are
	KindMeta     byte = 'T' // the layout: how many partitions
)

// Event kinds inside an operation.
const (
	EvFact     byte = 1 + iota // a span as the ledger read it
	EvEmit                     // a summary was made
	EvForget                   // the invocation was forgotten
	EvSent                     // a summary reached the next consumer
	EvTaint                    // the invocation's stored facts were lost
	EvTaintAll                 // the partition lost facts of unknown invocations
	EvRemember                 // the forgotten invocation's id is remembered until a time
	EvClosed                   // a closed invocation's whole state (compaction writes it instead of its facts)
)

// Emission flags.
const (
	EmitSent     = 1 << iota // the summary was delivered; its span is not stored
	EmitDetached             // its invocation was forgotten before it was delivered
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Op is one locked section of a shard (a batch's part or a timer
// tick): what it read and what it decided, in the order it happened.
type Op struct {
	Seq       uint64
	Time      int64    // the processor's clock, Unix nanoseconds
	Resources [][]byte // encoded resource attributes, referenced by facts
	Events    []Event
}

// Event is one entry of an operation.
type Event struct {
	Kind byte
	ID   string // the invocation, for every kind but EvTaintAll
	// EvFact
	Res  int    // index+1 into the operation's resources, 0 for none
	Fact []byte // the encoded span
	// EvEmit, EvSent
	Status   string
	Revision int64
	Forced   string // EvEmit: the forced reason of a first summary
	Flags    byte   // EvEmit
	Summary  []byte // EvEmit: the encoded summary span, unless sent
	// EvTaint, EvTaintAll, EvRemember
	Until int64
	// EvClosed: Res as for EvFact, and the invocation's state
	// (encodeClosed) in fact.
}

// EncodeOps frames operations as one stored value: version, kind, the
// invocation ids they name (with their own checksum, so a damaged body
// still says whom it concerned), then the body and its checksum.
func EncodeOps(kind byte, ops []Op) []byte {
	ids := map[string]int{}
	var order []string
	for i := range ops {
		for j := range ops[i].Events {
			ev := &ops[i].Events[j]
			if ev.Kind == EvTaintAll {
				continue
			}
			if _, ok := ids[ev.ID]; !ok {
				ids[ev.ID] = len(order)
				order = append(order, ev.ID)
			}
		}
	}
	e := Encoder{B: make([]byte, 0, 256)}
	e.Byte1(Version)
	e.Byte1(kind)
	e.Uvarint(uint64(len(order)))
	for _, id := range order {
		e.Str(id)
	}
	e.B = binary.LittleEndian.AppendUint32(e.B, crc32.Checksum(e.B, crcTable))
	bodyStart := len(e.B)
	e.Uvarint(uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		e.Uvarint(op.Seq)
		e.Varint(op.Time)
		e.Uvarint(uint64(len(op.Resources)))
		for _, r := range op.Resources {
			e.BytesLP(r)
		}
		e.Uvarint(uint64(len(op.Events)))
		for j := range op.Events {
			ev := &op.Events[j]
			e.Byte1(ev.Kind)
			if ev.Kind != EvTaintAll {
				e.Uvarint(uint64(ids[ev.ID]))
			}
			switch ev.Kind {
			case EvFact, EvClosed:
				e.Uvarint(uint64(ev.Res))
				e.BytesLP(ev.Fact)
			case EvEmit:
				e.Str(ev.Status)
				e.Varint(ev.Revision)
				e.Str(ev.Forced)
				e.Byte1(ev.Flags)
				if ev.Flags&EmitSent == 0 {
					e.BytesLP(ev.Summary)
				}
			case EvSent:
				e.Varint(ev.Revision)
				e.Str(ev.Status)
			case EvTaint, EvTaintAll, EvRemember:
				e.Varint(ev.Until)
			}
		}
	}
	e.B = binary.LittleEndian.AppendUint32(e.B, crc32.Checksum(e.B[bodyStart:], crcTable))
	return e.B
}

// DecodeOps reads what EncodeOps wrote. On error, ids holds the invocation
// ids of the header when the header itself was intact (the body is the
// damaged part), and is nil otherwise.
func DecodeOps(kind byte, b []byte) (ops []Op, ids []string, err error) {
	d := Decoder{B: b}
	version := d.Byte1()
	if d.Err == nil && !readableVersion(version) {
		return nil, nil, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, version, Version)
	}
	if k := d.Byte1(); d.Err == nil && k != kind {
		return nil, nil, fmt.Errorf("%w: kind %q, want %q", ErrCorrupt, k, kind)
	}
	n := d.Count(1)
	names := make([]string, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		names = append(names, d.Str())
	}
	headerEnd := d.off
	sum := d.Fixed(4)
	if d.Err != nil {
		return nil, nil, d.Err
	}
	if binary.LittleEndian.Uint32(sum) != crc32.Checksum(b[:headerEnd], crcTable) {
		return nil, nil, fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	bodyStart := d.off
	if len(b)-bodyStart < 4 {
		return nil, names, fmt.Errorf("%w: truncated body", ErrCorrupt)
	}
	bodyEnd := len(b) - 4
	if binary.LittleEndian.Uint32(b[bodyEnd:]) != crc32.Checksum(b[bodyStart:bodyEnd], crcTable) {
		return nil, names, fmt.Errorf("%w: body checksum mismatch", ErrCorrupt)
	}
	d.B = b[:bodyEnd]
	nops := d.Count(3)
	ops = make([]Op, 0, nops)
	for i := 0; i < nops && d.Err == nil; i++ {
		op := Op{Seq: d.Uvarint(), Time: d.Varint()}
		nres := d.Count(1)
		for j := 0; j < nres && d.Err == nil; j++ {
			op.Resources = append(op.Resources, d.BytesLP())
		}
		nev := d.Count(2)
		op.Events = make([]Event, 0, nev)
		for j := 0; j < nev && d.Err == nil; j++ {
			ev := Event{Kind: d.Byte1()}
			if ev.Kind != EvTaintAll {
				idx := d.Uvarint()
				if d.Err == nil && idx >= uint64(len(names)) {
					d.Fail("invocation index %d beyond %d ids", idx, len(names))
				}
				if d.Err == nil {
					ev.ID = names[idx]
				}
			}
			switch ev.Kind {
			case EvClosed:
				if version == VersionV1 {
					d.Fail("closed invocation in a version %d value", version)
				}
				fallthrough
			case EvFact:
				ev.Res = int(d.Uvarint())
				if d.Err == nil && ev.Res > len(op.Resources) {
					d.Fail("resource %d beyond %d", ev.Res, len(op.Resources))
				}
				ev.Fact = d.BytesLP()
			case EvEmit:
				ev.Status = d.Str()
				ev.Revision = d.Varint()
				ev.Forced = d.Str()
				ev.Flags = d.Byte1()
				if ev.Flags&^(EmitSent|EmitDetached) != 0 {
					d.Fail("bad emission flags %#x", ev.Flags)
				}
				if ev.Flags&EmitSent == 0 {
					ev.Summary = d.BytesLP()
				}
			case EvForget:
			case EvSent:
				ev.Revision = d.Varint()
				ev.Status = d.Str()
			case EvTaint, EvTaintAll, EvRemember:
				ev.Until = d.Varint()
			default:
				d.Fail("unknown event kind %d", ev.Kind)
			}
			op.Events = append(op.Events, ev)
		}
		ops = append(ops, op)
	}
	if d.Err == nil && d.Remaining() != 0 {
		d.Fail("%d trailing bytes", d.Remaining())
	}
	if d.Err != nil {
		return nil, names, d.Err
	}
	return ops, names, nil
}

// Manifest says where a partition's state is: the snapshot generation and
// its chunk count, and the first log sequence number not in the snapshot.
// The previous values let a restart delete what a crash left behind.
type Manifest struct {
	Gen, Chunks, LogStart             uint64
	PrevGen, PrevChunks, PrevLogStart uint64
	SnapBytes                         uint64
}

func (m Manifest) Encode() []byte {
	e := Encoder{}
	e.Byte1(Version)
	e.Byte1(KindManifest)
	for _, v := range []uint64{m.Gen, m.Chunks, m.LogStart, m.PrevGen, m.PrevChunks, m.PrevLogStart, m.SnapBytes} {
		e.Uvarint(v)
	}
	e.B = binary.LittleEndian.AppendUint32(e.B, crc32.Checksum(e.B, crcTable))
	return e.B
}

func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := checkFramed(b, KindManifest); err != nil {
		return m, err
	}
	d := Decoder{B: b[2 : len(b)-4]}
	for _, p := range []*uint64{&m.Gen, &m.Chunks, &m.LogStart, &m.PrevGen, &m.PrevChunks, &m.PrevLogStart, &m.SnapBytes} {
		*p = d.Uvarint()
	}
	if d.Err == nil && d.Remaining() != 0 {
		d.Fail("%d trailing bytes", d.Remaining())
	}
	return m, d.Err
}

func EncodeMeta(partitions int) []byte {
	e := Encoder{}
	e.Byte1(Version)
	e.Byte1(KindMeta)
	e.Uvarint(uint64(partitions))
	e.B = binary.LittleEndian.AppendUint32(e.B, crc32.Checksum(e.B, crcTable))
	return e.B
}

func DecodeMeta(b []byte) (int, error) {
	if err := checkFramed(b, KindMeta); err != nil {
		return 0, err
	}
	d := Decoder{B: b[2 : len(b)-4]}
	n := d.Uvarint()
	if d.Err == nil && (n == 0 || n > 1<<16 || d.Remaining() != 0) {
		d.Fail("bad partition count %d", n)
	}
	return int(n), d.Err
}

// checkFramed checks a small value's version, kind and trailing checksum.
func checkFramed(b []byte, kind byte) error {
	if len(b) < 6 {
		return fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if !readableVersion(b[0]) {
		return fmt.Errorf("%w: version %d, want %d", ErrCorrupt, b[0], Version)
	}
	if b[1] != kind {
		return fmt.Errorf("%w: kind %q, want %q", ErrCorrupt, b[1], kind)
	}
	if binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], crcTable) {
		return fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return nil
}

// Storage keys. Storage clients cannot list keys, so everything is found
// from MetaKey and one manifest per partition.
const MetaKey = "meta"

func ManifestKey(part int) string { return "m/" + strconv.Itoa(part) }

func LogKey(part int, seq uint64) string {
	return "l/" + strconv.Itoa(part) + "/" + strconv.FormatUint(seq, 10)
}

func ChunkKey(part int, gen, chunk uint64) string {
	return "s/" + strconv.Itoa(part) + "/" + strconv.FormatUint(gen, 10) + "/" + strconv.FormatUint(chunk, 10)
}
