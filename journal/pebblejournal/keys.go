package pebblejournal

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Record families: the first byte of every key. The layout is described in
// doc.go; change it only together with layoutVersion.
const (
	famMeta      byte = 0x00 // famMeta | name
	famConv      byte = 0x01 // famConv | conv
	famTombstone byte = 0x02 // famTombstone | conv
	famEvent     byte = 0x03 // famEvent | conv | seq
	famSummary   byte = 0x04 // famSummary | conv | to_seq
	famToolCall  byte = 0x05 // famToolCall | conv | call
	famPending   byte = 0x06 // famPending | conv | call
	famDeadline  byte = 0x07 // famDeadline | conv | call
	famAudit     byte = 0x08 // famAudit | conv | turn_ref
	famMetadata  byte = 0x09 // famMetadata | conv | key
	// famActive indexes the conversations whose row is ACTIVE (layout
	// v3): one empty value per conversation, set and deleted in the batch
	// that changes the row's status.
	famActive byte = 0x0a // famActive | conv
	// famFind (0x0b, fork.go) is the metadata index.
	famDeadlineByTime byte = 0x21 // famDeadlineByTime | seconds | nanos | call | conv
	// famCallOwner is the last family, so that the owner key of a new,
	// time-ordered tool call id sorts after every key already on disk: the
	// ownership check of a new call then reads no table (see doc.go).
	famCallOwner byte = 0x22 // famCallOwner | call
	// famCallOwnerV1 held the owner index in layout v1; Open moves it.
	famCallOwnerV1 byte = 0x20
)

// convFamilies are the families whose keys all start with family | conv and
// that DeleteConversation removes with one range delete each.
var convFamilies = []byte{famEvent, famSummary, famToolCall, famPending, famDeadline, famAudit, famMetadata}

// famName names a family in error messages.
func famName(f byte) string {
	switch f {
	case famMeta:
		return "meta"
	case famConv:
		return "conversation"
	case famTombstone:
		return "tombstone"
	case famEvent:
		return "event"
	case famSummary:
		return "summary"
	case famToolCall:
		return "tool call"
	case famPending:
		return "pending tool call"
	case famDeadline:
		return "deadline"
	case famAudit:
		return "audit"
	case famMetadata:
		return "metadata"
	case famActive:
		return "active conversation"
	case famFind:
		return "metadata index"
	case famCallOwner, famCallOwnerV1:
		return "tool call owner"
	case famDeadlineByTime:
		return "deadline-by-time"
	case famFileRef:
		return "file checkpoint"
	case famFileChunk:
		return "blob chunk"
	case famFileBlob:
		return "blob"
	case famSchedule:
		return "schedule"
	case famScheduleOwner:
		return "schedule owner"
	case famScheduleByTime:
		return "schedule-by-time"
	}
	return "unknown family 0x" + strconv.FormatUint(uint64(f), 16)
}

// knownKey reports whether k starts with the family byte of a key this
// layout writes (or an older one it upgrades).
func knownKey(k []byte) bool {
	return len(k) > 0 && !strings.HasPrefix(famName(k[0]), "unknown family")
}

// Escaping of ids inside keys: 0x00 becomes 0x00 0xFF and every id ends with
// 0x00 0x01. The encoding is prefix-free (no encoded id is a prefix of
// another) and preserves bytewise order.
const (
	escByte  byte = 0x00
	escNUL   byte = 0xFF
	escTerm  byte = 0x01
	escAfter byte = 0x02 // escTerm+1: ends the key range of one id
)

// appendID appends the escaped, terminated form of id to dst.
func appendID(dst []byte, id string) []byte {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == escByte {
			dst = append(dst, escByte, escNUL)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, escByte, escTerm)
}

// decodeID reads one escaped id from the front of b and returns it with the
// rest of b. ok is false if b does not start with a well-formed id.
func decodeID(b []byte) (id string, rest []byte, ok bool) {
	var buf []byte // allocated only when the id holds an escaped NUL
	start := 0
	for i := 0; i < len(b); i++ {
		if b[i] != escByte {
			continue
		}
		if i+1 >= len(b) {
			return "", nil, false
		}
		switch b[i+1] {
		case escTerm:
			if buf == nil {
				return string(b[:i]), b[i+2:], true
			}
			buf = append(buf, b[start:i]...)
			return string(buf), b[i+2:], true
		case escNUL:
			buf = append(buf, b[start:i]...)
			buf = append(buf, 0)
			i++
			start = i + 1
		default:
			return "", nil, false
		}
	}
	return "", nil, false
}

// convKey returns family | conv: the whole key of single-key families, and
// the prefix of every key of conv in the others.
func convKey(fam byte, conv string) []byte {
	k := make([]byte, 0, 1+len(conv)+2+8)
	return appendID(append(k, fam), conv)
}

// convEnd returns the exclusive upper bound of the keys of conv in family
// fam: the prefix with its terminator 0x00 0x01 replaced by 0x00 0x02.
func convEnd(fam byte, conv string) []byte {
	k := convKey(fam, conv)
	k[len(k)-1] = escAfter
	return k
}

// seqKey returns family | conv | seq (big-endian) for events, summaries and
// audit rows.
func seqKey(fam byte, conv string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(convKey(fam, conv), seq)
}

// idKey returns family | conv | id for tool call rows, pending entries,
// deadlines and metadata.
func idKey(fam byte, conv, id string) []byte {
	return appendID(convKey(fam, conv), id)
}

// ownerKey returns the key of the global tool call id -> conversation index.
func ownerKey(call string) []byte {
	return appendID(append(make([]byte, 0, 1+len(call)+2), famCallOwner), call)
}

// appendTime appends t as 8 bytes of seconds (sign bit flipped, so negative
// times sort first) and 4 bytes of nanoseconds, both big-endian.
func appendTime(dst []byte, sec int64, nanos int32) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(sec)^(1<<63))
	return binary.BigEndian.AppendUint32(dst, uint32(nanos))
}

const timeLen = 12

// byTimeKey returns the key of the global time-ordered deadline index.
func byTimeKey(at *timestamppb.Timestamp, call, conv string) []byte {
	k := make([]byte, 0, 1+timeLen+len(call)+len(conv)+4)
	k = appendTime(append(k, famDeadlineByTime), at.GetSeconds(), at.GetNanos())
	return appendID(appendID(k, call), conv)
}

// byTimeUpper returns the exclusive upper bound of the deadline-by-time keys
// at or before t.
func byTimeUpper(t time.Time) []byte {
	k := appendTime([]byte{famDeadlineByTime}, t.Unix(), int32(t.Nanosecond()))
	// Increment the 12-byte time as a big-endian number: the smallest time
	// prefix greater than t. Valid timestamps never overflow it.
	for i := len(k) - 1; i > 0; i-- {
		k[i]++
		if k[i] != 0 {
			break
		}
	}
	return k
}

// familyEnd returns the exclusive upper bound of a whole family.
func familyEnd(fam byte) []byte { return []byte{fam + 1} }

// keyString quotes a key for an error message.
func keyString(k []byte) string { return strconv.Quote(string(k)) }

// corruptKey reports a malformed key.
func corruptKey(k []byte, why string) error {
	fam := "empty"
	if len(k) > 0 {
		fam = famName(k[0])
	}
	return journal.Corruptf("pebblejournal: %s key %s: %s", fam, keyString(k), why)
}

// parseSeqKey checks that k is prefix | 8 bytes and returns the seq.
func parseSeqKey(k, prefix []byte) (uint64, error) {
	if len(k) != len(prefix)+8 || string(k[:len(prefix)]) != string(prefix) {
		return 0, corruptKey(k, "not a conversation prefix followed by a big-endian seq")
	}
	return binary.BigEndian.Uint64(k[len(prefix):]), nil
}

// parseIDKey checks that k is prefix | escaped id (and nothing after) and
// returns the id.
func parseIDKey(k, prefix []byte) (string, error) {
	if len(k) < len(prefix) || string(k[:len(prefix)]) != string(prefix) {
		return "", corruptKey(k, "outside its conversation's prefix")
	}
	id, rest, ok := decodeID(k[len(prefix):])
	if !ok || len(rest) != 0 {
		return "", corruptKey(k, "malformed id")
	}
	if err := journal.ValidateID("id", id); err != nil {
		return "", corruptKey(k, err.Error())
	}
	return id, nil
}

// parseByTimeKey decodes a deadline-by-time key.
func parseByTimeKey(k []byte) (at *timestamppb.Timestamp, call, conv string, err error) {
	if len(k) < 1+timeLen || k[0] != famDeadlineByTime {
		return nil, "", "", corruptKey(k, "too short")
	}
	sec := int64(binary.BigEndian.Uint64(k[1:9]) ^ (1 << 63))
	nanos := int32(binary.BigEndian.Uint32(k[9:13]))
	at = &timestamppb.Timestamp{Seconds: sec, Nanos: nanos}
	if err := at.CheckValid(); err != nil {
		return nil, "", "", corruptKey(k, "invalid time: "+err.Error())
	}
	call, rest, ok := decodeID(k[1+timeLen:])
	if !ok {
		return nil, "", "", corruptKey(k, "malformed tool call id")
	}
	conv, rest, ok = decodeID(rest)
	if !ok || len(rest) != 0 {
		return nil, "", "", corruptKey(k, "malformed conversation id")
	}
	if journal.ValidateID("id", call) != nil || journal.ValidateID("id", conv) != nil {
		return nil, "", "", corruptKey(k, "invalid id")
	}
	return at, call, conv, nil
}
