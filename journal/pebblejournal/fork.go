package pebblejournal

import (
	"context"
	"crypto/sha256"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// famFind is the metadata index: one key per conversation and metadata
// pair, set and deleted in the batch that changes the pair. The value is
// the metadata value (the key holds only its hash, so a long value makes
// no long key).
const famFind byte = 0x0b // famFind | key | sha256(value)[:16] | conv -> value

// findHashLen is the length of the value's hash in a famFind key.
const findHashLen = 16

// findPrefix returns famFind | key | hash(value): the prefix of the keys of
// every conversation holding the pair.
func findPrefix(key, value string) []byte {
	h := sha256.Sum256([]byte(value))
	k := appendID(append(make([]byte, 0, 1+len(key)+2+findHashLen+32), famFind), key)
	return append(k, h[:findHashLen]...)
}

// findKey returns the index key of conv holding (key, value).
func findKey(key, value, conv string) []byte {
	return appendID(findPrefix(key, value), conv)
}

var (
	_ journal.Forks         = (*Store)(nil)
	_ journal.MetadataIndex = (*Store)(nil)
)

// setMeta writes, in t's batch, the metadata key k of conversation id to v
// (an empty v deletes it) and its index entries: old is the value it had
// (had says whether it had one).
func (t *txn) setMeta(id, k, v, old string, had bool) {
	if had {
		_ = t.b.Delete(findKey(k, old, id), nil)
	}
	if v == "" {
		_ = t.b.Delete(idKey(famMetadata, id, k), nil)
		return
	}
	_ = t.b.Set(idKey(famMetadata, id, k), []byte(v), nil)
	_ = t.b.Set(findKey(k, v, id), []byte(v), nil)
}

// metaValue reads the committed value of metadata key k of id.
func (s *Store) metaValue(id, k string) (string, bool, error) {
	key := idKey(famMetadata, id, k)
	var val string
	found, err := s.get(key, func(v []byte) (err error) {
		val, err = decodeMetadataValue(key, v)
		return err
	})
	return val, found, err
}

// Fork implements journal.Forks: the events, the summary, the row (with
// its active-index entry) and the metadata (with its index entries) go in
// one synced batch.
func (s *Store) Fork(ctx context.Context, req *messages.ForkRequest) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if err := journal.ValidateFork(req); err != nil {
		return fmt.Errorf("pebblejournal: %w", err)
	}
	id := req.GetConversationId()
	defer s.lockConv(id)()
	t := s.newTxn()
	defer t.close()
	cs, err := t.live(id)
	if err != nil {
		return err
	}
	last, err := t.lastSeq(cs)
	if err != nil {
		return err
	}
	if has, err := t.hasRow(cs); err != nil {
		return err
	} else if has || last > 0 {
		return fmt.Errorf("pebblejournal: fork into %q: %w", id, journal.ErrExists)
	}
	if len(req.GetMetadata()) > 0 {
		cur, err := s.metadata(id) // a conversation without a row may have metadata
		if err != nil {
			return err
		}
		if err := journal.ValidateMetadata(id, journal.MergeSettings(cur, req.GetMetadata())); err != nil {
			return fmt.Errorf("pebblejournal: fork into %q: %w", id, err)
		}
	}
	if sum := req.GetSummary(); sum != nil {
		v, err := proto.Marshal(sum)
		if err != nil {
			return journal.Invalidf("pebblejournal: summary of fork %q cannot be encoded (%v)", id, err)
		}
		_ = t.b.Set(seqKey(famSummary, id, sum.GetToSeq()), v, nil)
	}
	for _, ev := range req.GetEvents() {
		v, err := proto.Marshal(ev)
		if err != nil {
			return journal.Invalidf("pebblejournal: event %d of fork %q cannot be encoded (%v)", ev.GetSeq(), id, err)
		}
		_ = t.b.Set(seqKey(famEvent, id, ev.GetSeq()), v, nil)
		last = ev.GetSeq()
	}
	for k, v := range req.GetMetadata() {
		old, had, err := s.metaValue(id, k) // a conversation without a row may have metadata
		if err != nil {
			return err
		}
		t.setMeta(id, k, v, old, had)
	}
	row, err := t.editRow(cs, nil)
	if err != nil {
		return err
	}
	row.Status = req.GetStatus()
	row.Settings = journal.MergeSettings(nil, req.GetSettings())
	if o := req.GetOrigin(); o != nil {
		row.ForkedFrom = proto.Clone(o).(*messages.ForkOrigin) // the cached row must not share the caller's
	}
	if err := t.setRow(cs, row); err != nil {
		return err
	}
	t.saveConv(cs)
	cs.seqLoaded, cs.lastSeq = true, last
	return t.commit()
}

// FindConversations implements journal.MetadataIndex: one iterator over
// the index keys of the pair, from the cursor on.
func (s *Store) FindConversations(ctx context.Context, key, value, cursor string, limit int) ([]string, string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, "", err
	}
	defer s.end()
	after, limit, err := journal.ParseFind(key, value, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("pebblejournal: %w", err)
	}
	if value == "" {
		return nil, "", nil
	}
	prefix := findPrefix(key, value)
	lower := prefix
	if after != "" {
		lower = appendID(append([]byte(nil), prefix...), after)
		lower[len(lower)-1] = escAfter // the first key after the cursor's
	}
	// No escaped id starts with 0xff (ids are UTF-8): this bounds the pair.
	upper := append(append([]byte(nil), prefix...), 0xff)
	it, err := s.newIter(lower, upper)
	if err != nil {
		return nil, "", err
	}
	var out []string
	next := ""
	for ok := it.First(); ok; ok = it.Next() {
		id, err := parseIDKey(it.Key(), prefix)
		if err != nil {
			return nil, "", closeIter(it, err)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, "", closeIter(it, fmt.Errorf("pebblejournal: read %s: %w", keyString(it.Key()), storageErr(err)))
		}
		if string(v) != value {
			continue // another value with the same hash
		}
		if len(out) == limit {
			next = journal.FindCursor(out[len(out)-1])
			break
		}
		out = append(out, id)
	}
	if err := closeIter(it, nil); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// findIndexKey marks a store whose metadata index (famFind) is built. A
// store written by a build without the index lacks it; Open builds the
// index then (ensureFindIndex). The layout version does not change: the
// index only adds keys.
var findIndexKey = []byte("\x00find-index")

// ensureFindIndex builds the metadata index of a store that has none: one
// synced batch sets the index key of every metadata pair, and the marker.
// It reads every metadata key, once. A crash before the commit leaves the
// store as it was, and the next Open builds the index again.
func (s *Store) ensureFindIndex() error {
	found, err := s.get(findIndexKey, nil)
	if err != nil || found {
		return err
	}
	if s.readOnly {
		// No metadata: the index Open would build is empty.
		some := false
		err := s.scanKeys([]byte{famMetadata}, familyEnd(famMetadata), func([]byte) error {
			some = true
			return errStopScan
		})
		if err != nil && err != errStopScan {
			return err
		}
		if some {
			return fmt.Errorf("%w: the store has metadata and no metadata index, which an Open that may write builds first", ErrUpgradeNeeded)
		}
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{famFind}, familyEnd(famFind), nil)
	pairs := 0
	err = s.scan([]byte{famMetadata}, familyEnd(famMetadata), func(k, v []byte) error {
		id, rest, ok := decodeID(k[1:])
		if !ok {
			return corruptKey(k, "malformed conversation id")
		}
		key, err := parseIDKey(k, k[:len(k)-len(rest)])
		if err != nil {
			return err
		}
		val, err := decodeMetadataValue(k, v)
		if err != nil {
			return err
		}
		pairs++
		_ = b.Set(findKey(key, val, id), v, nil)
		return nil
	})
	if err != nil {
		return err
	}
	_ = b.Set(findIndexKey, nil, nil)
	if err := s.commit(b); err != nil {
		return err
	}
	if pairs > 0 {
		s.log.Info("pebblejournal: built the metadata index", "pairs", pairs)
	}
	return nil
}
