package pebblejournal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Key families of file checkpoints (no layout change: a store without them
// simply has none).
const (
	// famFileRef holds the checkpoint records: famFileRef | conv | seq |
	// path -> FileCheckpoint. DeleteConversation removes them.
	famFileRef byte = 0x0f
	// famFileChunk holds the blobs' content: famFileChunk | sha256 (32
	// bytes) | chunk index (4 bytes, big-endian) -> at most
	// journal.FileChunkBytes of content.
	famFileChunk byte = 0x10
	// famFileBlob holds, under famFileBlob | 'b' | sha256, each stored
	// blob's FileBlob (written after its chunks: a blob without it is an
	// unfinished upload), and under famFileBlob | 'r' | sha256 | conv |
	// seq | path an empty value per record that names the blob, so the
	// sweeper finds whether a blob is referenced with one seek.
	famFileBlob byte = 0x1b
)

const (
	blobDesc byte = 'b'
	blobRef  byte = 'r'
	// fileStripes is the number of blob lock stripes.
	fileStripes = 64
)

var _ journal.FileCheckpoints = (*Store)(nil)

func fileRefKey(conv string, seq uint64, path string) []byte {
	return appendID(seqKey(famFileRef, conv, seq), path)
}

func chunkPrefix(raw []byte) []byte { return append([]byte{famFileChunk}, raw...) }

func chunkKey(raw []byte, idx uint32) []byte {
	return binary.BigEndian.AppendUint32(chunkPrefix(raw), idx)
}

func blobKey(raw []byte) []byte { return append([]byte{famFileBlob, blobDesc}, raw...) }

func blobRefPrefix(raw []byte) []byte { return append([]byte{famFileBlob, blobRef}, raw...) }

func blobRefKey(raw []byte, conv string, seq uint64, path string) []byte {
	k := appendID(blobRefPrefix(raw), conv)
	return appendID(binary.BigEndian.AppendUint64(k, seq), path)
}

// prefixEnd returns the exclusive upper bound of the keys starting with p.
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// rawSum validates sum and returns its 32 bytes.
func rawSum(sum string) ([]byte, error) {
	if err := journal.ValidateBlobSum(sum); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	raw, _ := hex.DecodeString(sum)
	return raw, nil
}

func (s *Store) lockBlob(raw []byte) func() {
	m := &s.fileLocks[int(raw[0])%fileStripes]
	m.Lock()
	return m.Unlock
}

// blobDescOf reads the blob's description; nil if it is not stored.
func (s *Store) blobDescOf(raw []byte) (*messages.FileBlob, error) {
	var d *messages.FileBlob
	k := blobKey(raw)
	_, err := s.get(k, func(v []byte) error {
		d = &messages.FileBlob{}
		if err := unmarshal(k, v, d); err != nil {
			return err
		}
		if d.GetSha256() != hex.EncodeToString(raw) || d.GetChunks() != journal.ChunkCount(d.GetSize()) {
			return corruptValue(k, "blob %s of %d bytes in %d chunks", d.GetSha256(), d.GetSize(), d.GetChunks())
		}
		return nil
	})
	return d, err
}

func (s *Store) setBlobDesc(b *pebble.Batch, raw []byte, d *messages.FileBlob) error {
	v, err := proto.Marshal(d)
	if err != nil {
		return fmt.Errorf("pebblejournal: encode blob: %w", err)
	}
	return b.Set(blobKey(raw), v, nil)
}

// PutFileBlob implements journal.FileCheckpoints. The chunks are written
// in one unsynced batch each as they are read; the description last, in a
// synced batch that makes them durable with it.
func (s *Store) PutFileBlob(ctx context.Context, sum string, size int64, r io.Reader) (*messages.FileBlob, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	raw, err := rawSum(sum)
	if err != nil {
		return nil, err
	}
	if size > journal.MaxFileBlobBytes {
		return nil, fmt.Errorf("pebblejournal: %w", journal.TooLargef("blob %s of %d bytes exceeds %d", sum, size, journal.MaxFileBlobBytes))
	}
	defer s.lockBlob(raw)()
	d, err := s.blobDescOf(raw)
	if err != nil {
		return nil, err
	}
	if d != nil {
		if d.GetSize() != size {
			return nil, fmt.Errorf("pebblejournal: %w", journal.Invalidf("blob %s has %d bytes, %d declared", sum, d.GetSize(), size))
		}
		d.Touched = timestamppb.New(s.now())
		b := s.db.NewBatch()
		defer b.Close()
		if err := s.setBlobDesc(b, raw, d); err != nil {
			return nil, err
		}
		return d, s.commit(b)
	}
	n, err := journal.ChunkBlob(sum, size, r, func(idx uint32, c []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := s.db.NewBatch()
		defer b.Close()
		_ = b.Set(chunkKey(raw, idx), c, nil)
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("pebblejournal: write blob chunk: %w", storageErr(err))
		}
		return nil
	})
	b := s.db.NewBatch()
	defer b.Close()
	if err != nil {
		// Best effort: a sweep removes what is left.
		_ = b.DeleteRange(chunkPrefix(raw), prefixEnd(chunkPrefix(raw)), nil)
		_ = b.Commit(pebble.NoSync)
		return nil, fmt.Errorf("pebblejournal: put blob: %w", err)
	}
	d = &messages.FileBlob{Sha256: sum, Size: size, Chunks: n, Touched: timestamppb.New(s.now())}
	if err := s.setBlobDesc(b, raw, d); err != nil {
		return nil, err
	}
	if err := s.commit(b); err != nil {
		return nil, err
	}
	return d, nil
}

// FileBlob implements journal.FileCheckpoints.
func (s *Store) FileBlob(ctx context.Context, sum string) (*messages.FileBlob, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	raw, err := rawSum(sum)
	if err != nil {
		return nil, err
	}
	d, err := s.blobDescOf(raw)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("pebblejournal: blob %s: %w", sum, journal.ErrNotFound)
	}
	return d, nil
}

// OpenFileBlob implements journal.FileCheckpoints: each Read past the
// current chunk reads the next one from Pebble.
func (s *Store) OpenFileBlob(ctx context.Context, sum string) (io.ReadCloser, error) {
	d, err := s.FileBlob(ctx, sum)
	if err != nil {
		return nil, err
	}
	raw, _ := hex.DecodeString(sum)
	return journal.NewBlobReader(d, func(idx uint32) ([]byte, error) {
		if err := s.begin(ctx); err != nil {
			return nil, err
		}
		defer s.end()
		var c []byte
		found, err := s.get(chunkKey(raw, idx), func(v []byte) error {
			c = slices.Clone(v)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("pebblejournal: blob %s chunk %d: %w", sum, idx, journal.ErrNotFound)
		}
		return c, nil
	}), nil
}

// PutFileCheckpoint implements journal.FileCheckpoints.
func (s *Store) PutFileCheckpoint(ctx context.Context, cp *messages.FileCheckpoint) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	defer s.end()
	if err := journal.ValidateFileCheckpoint(cp); err != nil {
		return false, fmt.Errorf("pebblejournal: %w", err)
	}
	id := cp.GetConversationId()
	defer s.lockConv(id)()
	t := s.newTxn()
	defer t.close()
	cs, err := t.conv(id)
	if err != nil {
		return false, err
	}
	if cs.tomb {
		return false, fmt.Errorf("pebblejournal: file checkpoint of %q: %w", id, journal.ErrDeleted)
	}
	row, err := t.row(cs)
	if err != nil {
		return false, err
	}
	if row == nil {
		return false, fmt.Errorf("pebblejournal: file checkpoint of %q: %w", id, journal.ErrNotFound)
	}
	k := fileRefKey(id, cp.GetSeq(), cp.GetPath())
	found, err := s.get(k, nil)
	if err != nil || found {
		return false, err
	}
	b := t.b
	if !cp.GetAbsent() {
		raw, _ := hex.DecodeString(cp.GetSha256())
		defer s.lockBlob(raw)()
		d, err := s.blobDescOf(raw)
		if err != nil {
			return false, err
		}
		if d == nil {
			return false, fmt.Errorf("pebblejournal: file checkpoint of %q: blob %s: %w", id, cp.GetSha256(), journal.ErrNotFound)
		}
		d.Touched = timestamppb.New(s.now())
		if err := s.setBlobDesc(b, raw, d); err != nil {
			return false, err
		}
		_ = b.Set(blobRefKey(raw, id, cp.GetSeq(), cp.GetPath()), nil, nil)
	}
	v, err := proto.Marshal(cp)
	if err != nil {
		return false, fmt.Errorf("pebblejournal: encode file checkpoint: %w", err)
	}
	_ = b.Set(k, v, nil)
	if err := s.commit(b); err != nil {
		return false, err
	}
	return true, nil
}

// decodeFileCheckpoint decodes a record and checks it against its key.
func decodeFileCheckpoint(k, v []byte, conv string) (*messages.FileCheckpoint, error) {
	cp := &messages.FileCheckpoint{}
	if err := unmarshal(k, v, cp); err != nil {
		return nil, err
	}
	if cp.GetConversationId() != conv || !bytes.Equal(k, fileRefKey(conv, cp.GetSeq(), cp.GetPath())) {
		return nil, corruptValue(k, "file checkpoint of %q at seq %d", cp.GetConversationId(), cp.GetSeq())
	}
	if err := journal.ValidateFileCheckpoint(cp); err != nil {
		return nil, corruptValue(k, "file checkpoint: %v", err)
	}
	return cp, nil
}

// FileCheckpoints implements journal.FileCheckpoints.
func (s *Store) FileCheckpoints(ctx context.Context, conversationID string, afterSeq uint64) ([]*messages.FileCheckpoint, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return nil, fmt.Errorf("pebblejournal: %w", err)
	}
	lower := convKey(famFileRef, conversationID)
	if afterSeq < ^uint64(0) {
		lower = seqKey(famFileRef, conversationID, afterSeq+1)
	}
	var out []*messages.FileCheckpoint
	err := s.scan(lower, convEnd(famFileRef, conversationID), func(k, v []byte) error {
		cp, err := decodeFileCheckpoint(k, v, conversationID)
		if err != nil {
			return err
		}
		out = append(out, cp)
		return nil
	})
	return out, err
}

// deleteFileRefs adds to b the removal of the conversation's records and
// of the blobs' references to them (DeleteConversation).
func (s *Store) deleteFileRefs(b *pebble.Batch, conv string) error {
	err := s.scan(convKey(famFileRef, conv), convEnd(famFileRef, conv), func(k, v []byte) error {
		cp, err := decodeFileCheckpoint(k, v, conv)
		if err != nil {
			return err
		}
		if !cp.GetAbsent() {
			raw, _ := hex.DecodeString(cp.GetSha256())
			_ = b.Delete(blobRefKey(raw, conv, cp.GetSeq(), cp.GetPath()), nil)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.DeleteRange(convKey(famFileRef, conv), convEnd(famFileRef, conv), nil)
}

// sweepPage bounds the old blobs SweepFileBlobs lists before it sweeps
// them: it lists and sweeps page by page, so its memory does not grow with
// the number of blobs. A variable so that tests can lower it.
var sweepPage = 256

// SweepFileBlobs implements journal.FileCheckpoints. It lists the old
// blobs, sweepPage at a time, then removes each, under its lock, if it is
// still old and no record names it; then it removes the chunks of
// unfinished uploads. It checks ctx at every blob it lists or sweeps.
func (s *Store) SweepFileBlobs(ctx context.Context, olderThan time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.end()
	descLo := []byte{famFileBlob, blobDesc}
	lo, hi := descLo, prefixEnd(descLo)
	n := 0
	for {
		var old [][]byte
		var next []byte // where the next page starts; nil: the listing is done
		err := s.scan(lo, hi, func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("pebblejournal: %w", err)
			}
			if len(old) == sweepPage {
				next = slices.Clone(k)
				return errStopScan
			}
			if len(k) != 2+32 {
				return corruptKey(k, "blob key")
			}
			d := &messages.FileBlob{}
			if err := unmarshal(k, v, d); err != nil {
				return err
			}
			if d.GetTouched().AsTime().Before(olderThan) {
				old = append(old, slices.Clone(k[2:]))
			}
			return nil
		})
		if err != nil && err != errStopScan {
			return n, err
		}
		for _, raw := range old {
			if err := ctx.Err(); err != nil {
				return n, fmt.Errorf("pebblejournal: %w", err)
			}
			removed, err := s.sweepBlob(raw, olderThan)
			if err != nil {
				return n, err
			}
			if removed {
				n++
			}
		}
		if next == nil {
			break
		}
		lo = next
	}
	return n, s.sweepOrphanChunks(ctx)
}

func (s *Store) sweepBlob(raw []byte, olderThan time.Time) (bool, error) {
	defer s.lockBlob(raw)()
	d, err := s.blobDescOf(raw)
	if err != nil || d == nil || !d.GetTouched().AsTime().Before(olderThan) {
		return false, err
	}
	referenced := false
	err = s.scanKeys(blobRefPrefix(raw), prefixEnd(blobRefPrefix(raw)), func([]byte) error {
		referenced = true
		return errStopScan
	})
	if err != nil && err != errStopScan {
		return false, err
	}
	if referenced {
		return false, nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(blobKey(raw), nil)
	_ = b.DeleteRange(chunkPrefix(raw), prefixEnd(chunkPrefix(raw)), nil)
	return true, s.commit(b)
}

// sweepOrphanChunks removes the chunks of blobs that have no description
// (an upload that failed or was cut by a crash). It seeks from blob to
// blob, so it reads one key per blob with chunks.
func (s *Store) sweepOrphanChunks(ctx context.Context) error {
	lo := []byte{famFileChunk}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pebblejournal: %w", err)
		}
		var raw []byte
		err := s.scanKeys(lo, familyEnd(famFileChunk), func(k []byte) error {
			if len(k) != 1+32+4 {
				return corruptKey(k, "blob chunk key")
			}
			raw = slices.Clone(k[1:33])
			return errStopScan
		})
		if err != nil && err != errStopScan {
			return err
		}
		if raw == nil {
			return nil
		}
		if err := s.sweepOrphan(raw); err != nil {
			return err
		}
		lo = prefixEnd(chunkPrefix(raw))
	}
}

func (s *Store) sweepOrphan(raw []byte) error {
	defer s.lockBlob(raw)()
	d, err := s.blobDescOf(raw)
	if err != nil || d != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(chunkPrefix(raw), prefixEnd(chunkPrefix(raw)), nil)
	return s.commit(b)
}

// errStopScan ends a scan early; never returned to callers.
var errStopScan = fmt.Errorf("pebblejournal: stop scan")

// checkFiles is Check's part for file checkpoints: every record decodes
// and has its blob's reference, every reference its record, every blob's
// description decodes and its chunks are all there with their lengths
// (whose bytes are read, so Pebble verifies their checksums).
func (s *Store) checkFiles(ctx context.Context, r *CheckReport) error {
	refs := map[string]bool{} // reference keys the records imply
	err := s.scan([]byte{famFileRef}, familyEnd(famFileRef), func(k, v []byte) error {
		conv, _, ok := decodeID(k[1:])
		if !ok {
			r.problem("malformed file checkpoint key %s", keyString(k))
			return ctx.Err()
		}
		cp, err := decodeFileCheckpoint(k, v, conv)
		if err != nil {
			r.problem("conversation %q: %v", conv, err)
			return ctx.Err()
		}
		if !cp.GetAbsent() {
			raw, _ := hex.DecodeString(cp.GetSha256())
			refs[string(blobRefKey(raw, conv, cp.GetSeq(), cp.GetPath()))] = true
			if d, err := s.blobDescOf(raw); err != nil || d == nil {
				r.problem("conversation %q: file checkpoint of %q at seq %d names blob %s, which is missing (%v)", conv, cp.GetPath(), cp.GetSeq(), cp.GetSha256(), err)
			}
		}
		return ctx.Err()
	})
	if err := checkCtx(ctx, r, "file checkpoint", err); err != nil {
		return err
	}
	refLo := []byte{famFileBlob, blobRef}
	err = s.scanKeys(refLo, prefixEnd(refLo), func(k []byte) error {
		if !refs[string(k)] {
			r.problem("blob reference %s has no file checkpoint", keyString(k))
		}
		delete(refs, string(k))
		return ctx.Err()
	})
	if err := checkCtx(ctx, r, "blob reference", err); err != nil {
		return err
	}
	for k := range refs {
		r.problem("file checkpoint without its blob reference %s", keyString([]byte(k)))
	}
	descLo := []byte{famFileBlob, blobDesc}
	err = s.scanKeys(descLo, prefixEnd(descLo), func(k []byte) error {
		if len(k) != 2+32 {
			r.problem("malformed blob key %s", keyString(k))
			return ctx.Err()
		}
		raw := k[2:]
		d, err := s.blobDescOf(raw)
		if err != nil || d == nil {
			r.problem("blob %x: %v", raw, err)
			return ctx.Err()
		}
		for i := uint32(0); i < d.GetChunks(); i++ {
			want := min(int64(journal.FileChunkBytes), d.GetSize()-int64(i)*journal.FileChunkBytes)
			var got int64 = -1
			if _, err := s.get(chunkKey(raw, i), func(v []byte) error { got = int64(len(v)); return nil }); err != nil {
				r.problem("blob %s chunk %d: %v", d.GetSha256(), i, err)
			} else if got != want {
				r.problem("blob %s chunk %d: %d bytes, %d expected", d.GetSha256(), i, got, want)
			}
		}
		return ctx.Err()
	})
	return checkCtx(ctx, r, "blob", err)
}

// checkCtx ends Check on a done ctx and reports a family it could not read.
func checkCtx(ctx context.Context, r *CheckReport, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("pebblejournal: check: %w", ctxErr)
	}
	if err != nil {
		r.problem("%s records: unreadable, the rest were not checked: %v", what, err)
	}
	return nil
}
