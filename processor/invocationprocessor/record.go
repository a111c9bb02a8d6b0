package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
)

// codecVersion is the first byte of every stored value written. Version 2
// added evClosed; a value of version 1 is read as before, one of any
// other version is not read (it is counted and reported like corrupt
// data).
const (
	codecVersion   byte = 2
	codecVersionV1 byte = 1
)

// readableVersion reports whether a stored value of version v is read.
func readableVersion(v byte) bool { return v == codecVersion || v == codecVersionV1 }

// Kinds of stored values (the second byte).
const (
	kindLog      byte = 'L' // one operation of a partition's log
	kindChunk    byte = 'C' // part of a partition's snapshot: many operations
	kindManifest byte = 'M' // where a partition's snapshot and log are
	kindMeta     byte = 'T' // the layout: how many partitions
)

// Event kinds inside an operation.
const (
	evFact     byte = 1 + iota // a span as the ledger read it
	evEmit                     // a summary was made
	evForget                   // the invocation was forgotten
	evSent                     // a summary reached the next consumer
	evTaint                    // the invocation's stored facts were lost
	evTaintAll                 // the partition lost facts of unknown invocations
	evRemember                 // the forgotten invocation's id is remembered until a time
	evClosed                   // a closed invocation's whole state (compaction writes it instead of its facts)
)

// Emission flags.
const (
	emitSent     = 1 << iota // the summary was delivered; its span is not stored
	emitDetached             // its invocation was forgotten before it was delivered
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// storedOp is one locked section of a shard (a batch's part or a timer
// tick): what it read and what it decided, in the order it happened.
type storedOp struct {
	seq       uint64
	time      int64    // the processor's clock, Unix nanoseconds
	resources [][]byte // encoded resource attributes, referenced by facts
	events    []storedEvent
}

// storedEvent is one entry of an operation.
type storedEvent struct {
	kind byte
	id   string // the invocation, for every kind but evTaintAll
	// evFact
	res  int    // index+1 into the operation's resources, 0 for none
	fact []byte // the encoded span
	// evEmit, evSent
	status   string
	revision int64
	forced   string // evEmit: the forced reason of a first summary
	flags    byte   // evEmit
	summary  []byte // evEmit: the encoded summary span, unless sent
	// evTaint, evTaintAll, evRemember
	until int64
	// evClosed: res as for evFact, and the invocation's state
	// (encodeClosed) in fact.
}

// encodeOps frames operations as one stored value: version, kind, the
// invocation ids they name (with their own checksum, so a damaged body
// still says whom it concerned), then the body and its checksum.
func encodeOps(kind byte, ops []storedOp) []byte {
	ids := map[string]int{}
	var order []string
	for i := range ops {
		for j := range ops[i].events {
			ev := &ops[i].events[j]
			if ev.kind == evTaintAll {
				continue
			}
			if _, ok := ids[ev.id]; !ok {
				ids[ev.id] = len(order)
				order = append(order, ev.id)
			}
		}
	}
	e := encoder{b: make([]byte, 0, 256)}
	e.byte1(codecVersion)
	e.byte1(kind)
	e.uvarint(uint64(len(order)))
	for _, id := range order {
		e.str(id)
	}
	e.b = binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, crcTable))
	bodyStart := len(e.b)
	e.uvarint(uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		e.uvarint(op.seq)
		e.varint(op.time)
		e.uvarint(uint64(len(op.resources)))
		for _, r := range op.resources {
			e.bytesLP(r)
		}
		e.uvarint(uint64(len(op.events)))
		for j := range op.events {
			ev := &op.events[j]
			e.byte1(ev.kind)
			if ev.kind != evTaintAll {
				e.uvarint(uint64(ids[ev.id]))
			}
			switch ev.kind {
			case evFact, evClosed:
				e.uvarint(uint64(ev.res))
				e.bytesLP(ev.fact)
			case evEmit:
				e.str(ev.status)
				e.varint(ev.revision)
				e.str(ev.forced)
				e.byte1(ev.flags)
				if ev.flags&emitSent == 0 {
					e.bytesLP(ev.summary)
				}
			case evSent:
				e.varint(ev.revision)
				e.str(ev.status)
			case evTaint, evTaintAll, evRemember:
				e.varint(ev.until)
			}
		}
	}
	e.b = binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b[bodyStart:], crcTable))
	return e.b
}

// decodeOps reads what encodeOps wrote. On error, ids holds the invocation
// ids of the header when the header itself was intact (the body is the
// damaged part), and is nil otherwise.
func decodeOps(kind byte, b []byte) (ops []storedOp, ids []string, err error) {
	d := decoder{b: b}
	version := d.byte1()
	if d.err == nil && !readableVersion(version) {
		return nil, nil, fmt.Errorf("%w: version %d, want %d", errCorrupt, version, codecVersion)
	}
	if k := d.byte1(); d.err == nil && k != kind {
		return nil, nil, fmt.Errorf("%w: kind %q, want %q", errCorrupt, k, kind)
	}
	n := d.count(1)
	names := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		names = append(names, d.str())
	}
	headerEnd := d.off
	sum := d.fixed(4)
	if d.err != nil {
		return nil, nil, d.err
	}
	if binary.LittleEndian.Uint32(sum) != crc32.Checksum(b[:headerEnd], crcTable) {
		return nil, nil, fmt.Errorf("%w: header checksum mismatch", errCorrupt)
	}
	bodyStart := d.off
	if len(b)-bodyStart < 4 {
		return nil, names, fmt.Errorf("%w: truncated body", errCorrupt)
	}
	bodyEnd := len(b) - 4
	if binary.LittleEndian.Uint32(b[bodyEnd:]) != crc32.Checksum(b[bodyStart:bodyEnd], crcTable) {
		return nil, names, fmt.Errorf("%w: body checksum mismatch", errCorrupt)
	}
	d.b = b[:bodyEnd]
	nops := d.count(3)
	ops = make([]storedOp, 0, nops)
	for i := 0; i < nops && d.err == nil; i++ {
		op := storedOp{seq: d.uvarint(), time: d.varint()}
		nres := d.count(1)
		for j := 0; j < nres && d.err == nil; j++ {
			op.resources = append(op.resources, d.bytesLP())
		}
		nev := d.count(2)
		op.events = make([]storedEvent, 0, nev)
		for j := 0; j < nev && d.err == nil; j++ {
			ev := storedEvent{kind: d.byte1()}
			if ev.kind != evTaintAll {
				idx := d.uvarint()
				if d.err == nil && idx >= uint64(len(names)) {
					d.fail("invocation index %d beyond %d ids", idx, len(names))
				}
				if d.err == nil {
					ev.id = names[idx]
				}
			}
			switch ev.kind {
			case evClosed:
				if version == codecVersionV1 {
					d.fail("closed invocation in a version %d value", version)
				}
				fallthrough
			case evFact:
				ev.res = int(d.uvarint())
				if d.err == nil && ev.res > len(op.resources) {
					d.fail("resource %d beyond %d", ev.res, len(op.resources))
				}
				ev.fact = d.bytesLP()
			case evEmit:
				ev.status = d.str()
				ev.revision = d.varint()
				ev.forced = d.str()
				ev.flags = d.byte1()
				if ev.flags&^(emitSent|emitDetached) != 0 {
					d.fail("bad emission flags %#x", ev.flags)
				}
				if ev.flags&emitSent == 0 {
					ev.summary = d.bytesLP()
				}
			case evForget:
			case evSent:
				ev.revision = d.varint()
				ev.status = d.str()
			case evTaint, evTaintAll, evRemember:
				ev.until = d.varint()
			default:
				d.fail("unknown event kind %d", ev.kind)
			}
			op.events = append(op.events, ev)
		}
		ops = append(ops, op)
	}
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	if d.err != nil {
		return nil, names, d.err
	}
	return ops, names, nil
}

// manifest says where a partition's state is: the snapshot generation and
// its chunk count, and the first log sequence number not in the snapshot.
// The previous values let a restart delete what a crash left behind.
type manifest struct {
	gen, chunks, logStart             uint64
	prevGen, prevChunks, prevLogStart uint64
	snapBytes                         uint64
}

func (m manifest) encode() []byte {
	e := encoder{}
	e.byte1(codecVersion)
	e.byte1(kindManifest)
	for _, v := range []uint64{m.gen, m.chunks, m.logStart, m.prevGen, m.prevChunks, m.prevLogStart, m.snapBytes} {
		e.uvarint(v)
	}
	e.b = binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, crcTable))
	return e.b
}

func decodeManifest(b []byte) (manifest, error) {
	var m manifest
	if err := checkFramed(b, kindManifest); err != nil {
		return m, err
	}
	d := decoder{b: b[2 : len(b)-4]}
	for _, p := range []*uint64{&m.gen, &m.chunks, &m.logStart, &m.prevGen, &m.prevChunks, &m.prevLogStart, &m.snapBytes} {
		*p = d.uvarint()
	}
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	return m, d.err
}

func encodeMeta(partitions int) []byte {
	e := encoder{}
	e.byte1(codecVersion)
	e.byte1(kindMeta)
	e.uvarint(uint64(partitions))
	e.b = binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, crcTable))
	return e.b
}

func decodeMeta(b []byte) (int, error) {
	if err := checkFramed(b, kindMeta); err != nil {
		return 0, err
	}
	d := decoder{b: b[2 : len(b)-4]}
	n := d.uvarint()
	if d.err == nil && (n == 0 || n > 1<<16 || d.remaining() != 0) {
		d.fail("bad partition count %d", n)
	}
	return int(n), d.err
}

// checkFramed checks a small value's version, kind and trailing checksum.
func checkFramed(b []byte, kind byte) error {
	if len(b) < 6 {
		return fmt.Errorf("%w: %d bytes", errCorrupt, len(b))
	}
	if !readableVersion(b[0]) {
		return fmt.Errorf("%w: version %d, want %d", errCorrupt, b[0], codecVersion)
	}
	if b[1] != kind {
		return fmt.Errorf("%w: kind %q, want %q", errCorrupt, b[1], kind)
	}
	if binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], crcTable) {
		return fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	return nil
}

// Storage keys. Storage clients cannot list keys, so everything is found
// from metaKey and one manifest per partition.
const metaKey = "meta"

func manifestKey(part int) string { return "m/" + strconv.Itoa(part) }

func logKey(part int, seq uint64) string {
	return "l/" + strconv.Itoa(part) + "/" + strconv.FormatUint(seq, 10)
}

func chunkKey(part int, gen, chunk uint64) string {
	return "s/" + strconv.Itoa(part) + "/" + strconv.FormatUint(gen, 10) + "/" + strconv.FormatUint(chunk, 10)
}
