package pgjournal

import (
	"encoding/binary"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// byteaArray is a bytea[] parameter of AppendBatch's statements, encoded by
// byteaArrayCodec in one pass into a buffer grown once: pgx's own encoding
// of a [][]byte goes through reflection and grows its buffer element by
// element, which was about 7% of the CPU of a loaded runtime on PostgreSQL.
// A nil element is NULL, as pgx encodes a nil []byte. Use it only on a
// connection prepared by useByteaArrays.
type byteaArray [][]byte

// byteaOID and byteaArrayOID are PostgreSQL's fixed OIDs of bytea and
// bytea[].
const byteaOID, byteaArrayOID = 17, 1001

// byteaArrayCodec is the codec of bytea[] on the Store's connections: it
// encodes a byteaArray itself and hands every other value, and every scan,
// to the codec it wraps (pgx's), so that the connection's other queries
// see no change.
type byteaArrayCodec struct {
	pgtype.Codec
}

// PlanEncode implements pgtype.Codec.
func (c byteaArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(byteaArray); ok && format == pgtype.BinaryFormatCode {
		return byteaArrayPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// byteaArrayPlan encodes a byteaArray in PostgreSQL's binary array format:
// the number of dimensions, a has-null flag, the element type, each
// dimension's length and lower bound, then each element as its length
// (-1 for NULL) and bytes.
type byteaArrayPlan struct{}

// Encode implements pgtype.EncodePlan.
func (byteaArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(byteaArray)
	if a == nil {
		return nil, nil // NULL, as pgx encodes a nil slice
	}
	size, hasNull := 12, uint32(0)
	if len(a) > 0 {
		size += 8
	}
	for _, e := range a {
		size += 4 + len(e)
		if e == nil {
			hasNull = 1
		}
	}
	buf = slices.Grow(buf, size)
	if len(a) == 0 {
		buf = binary.BigEndian.AppendUint32(buf, 0) // no dimension: an empty array
		buf = binary.BigEndian.AppendUint32(buf, 0)
		return binary.BigEndian.AppendUint32(buf, byteaOID), nil
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, hasNull)
	buf = binary.BigEndian.AppendUint32(buf, byteaOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(a)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, e := range a {
		if e == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
	}
	return buf, nil
}

// useByteaArrays makes conn encode byteaArray parameters with
// byteaArrayCodec, once per connection. It reports false if the
// connection's bytea[] type is not the one it knows (then the caller
// passes plain [][]byte).
func useByteaArrays(conn *pgx.Conn) bool {
	m := conn.TypeMap()
	t, ok := m.TypeForOID(byteaArrayOID)
	if !ok {
		return false
	}
	if _, done := t.Codec.(byteaArrayCodec); done {
		return true
	}
	if _, std := t.Codec.(*pgtype.ArrayCodec); !std {
		return false
	}
	m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: byteaArrayCodec{Codec: t.Codec}})
	return true
}

// byteas returns a as the parameter to pass: a byteaArray where the
// connection encodes it (fast), a plain [][]byte otherwise.
func byteas(fast bool, a [][]byte) any {
	if fast {
		return byteaArray(a)
	}
	return a
}
