package memjournal

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var _ journal.FileCheckpoints = (*Store)(nil)

// fileState holds the blobs and the file checkpoint records.
type fileState struct {
	blobs map[string]*memBlob
	cps   map[string]map[cpKey]*messages.FileCheckpoint // by conversation
	refs  map[string]int                                // blob -> records naming it
}

type memBlob struct {
	desc   *messages.FileBlob
	chunks [][]byte
}

type cpKey struct {
	seq  uint64
	path string
}

func newFileState() fileState {
	return fileState{blobs: map[string]*memBlob{}, cps: map[string]map[cpKey]*messages.FileCheckpoint{}, refs: map[string]int{}}
}

// dropConversation removes the conversation's records (its blobs stay
// until a sweep finds them unreferenced).
func (f *fileState) dropConversation(id string) {
	for _, cp := range f.cps[id] {
		if !cp.GetAbsent() {
			if f.refs[cp.GetSha256()]--; f.refs[cp.GetSha256()] <= 0 {
				delete(f.refs, cp.GetSha256())
			}
		}
	}
	delete(f.cps, id)
}

// PutFileBlob implements journal.FileCheckpoints.
func (s *Store) PutFileBlob(ctx context.Context, sum string, size int64, r io.Reader) (*messages.FileBlob, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateBlobSum(sum); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	if size > journal.MaxFileBlobBytes {
		return nil, fmt.Errorf("memjournal: %w", journal.TooLargef("blob %s of %d bytes exceeds %d", sum, size, journal.MaxFileBlobBytes))
	}
	if d, ok, err := s.touchBlob(sum, size); err != nil || ok {
		return d, err
	}
	// Read outside the lock: r may be slow.
	var chunks [][]byte
	n, err := journal.ChunkBlob(sum, size, r, func(_ uint32, c []byte) error {
		chunks = append(chunks, slices.Clone(c))
		return ctx.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("memjournal: put blob: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	b := st.files.blobs[sum]
	if b == nil {
		b = &memBlob{desc: &messages.FileBlob{Sha256: sum, Size: size, Chunks: n}, chunks: chunks}
		st.files.blobs[sum] = b
	}
	b.desc.Touched = timestamppb.Now()
	return proto.Clone(b.desc).(*messages.FileBlob), nil
}

// touchBlob marks the blob touched now and returns its description if it
// is stored. A stored blob whose size is not size is ErrInvalid, and is not
// touched.
func (s *Store) touchBlob(sum string, size int64) (*messages.FileBlob, bool, error) {
	st, err := s.lock()
	if err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	b := st.files.blobs[sum]
	if b == nil {
		return nil, false, nil
	}
	if b.desc.GetSize() != size {
		return nil, true, fmt.Errorf("memjournal: %w", journal.Invalidf("blob %s has %d bytes, %d declared", sum, b.desc.GetSize(), size))
	}
	b.desc.Touched = timestamppb.Now()
	return proto.Clone(b.desc).(*messages.FileBlob), true, nil
}

// FileBlob implements journal.FileCheckpoints.
func (s *Store) FileBlob(ctx context.Context, sum string) (*messages.FileBlob, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := journal.ValidateBlobSum(sum); err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	b := st.files.blobs[sum]
	if b == nil {
		return nil, fmt.Errorf("memjournal: blob %s: %w", sum, journal.ErrNotFound)
	}
	return proto.Clone(b.desc).(*messages.FileBlob), nil
}

// OpenFileBlob implements journal.FileCheckpoints.
func (s *Store) OpenFileBlob(ctx context.Context, sum string) (io.ReadCloser, error) {
	d, err := s.FileBlob(ctx, sum)
	if err != nil {
		return nil, err
	}
	return journal.NewBlobReader(d, func(idx uint32) ([]byte, error) {
		if err := s.enter(ctx); err != nil {
			return nil, err
		}
		st, err := s.lock()
		if err != nil {
			return nil, err
		}
		defer s.mu.Unlock()
		b := st.files.blobs[sum]
		if b == nil || int(idx) >= len(b.chunks) {
			return nil, fmt.Errorf("memjournal: blob %s chunk %d: %w", sum, idx, journal.ErrNotFound)
		}
		return b.chunks[idx], nil // never modified: chunks are replaced whole
	}), nil
}

// PutFileCheckpoint implements journal.FileCheckpoints.
func (s *Store) PutFileCheckpoint(ctx context.Context, cp *messages.FileCheckpoint) (bool, error) {
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	if err := journal.ValidateFileCheckpoint(cp); err != nil {
		return false, fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	id := cp.GetConversationId()
	if _, ok := st.deleted[id]; ok {
		return false, fmt.Errorf("memjournal: file checkpoint of %q: %w", id, journal.ErrDeleted)
	}
	if c := st.convs[id]; c == nil || c.row == nil {
		return false, fmt.Errorf("memjournal: file checkpoint of %q: %w", id, journal.ErrNotFound)
	}
	k := cpKey{cp.GetSeq(), cp.GetPath()}
	if _, ok := st.files.cps[id][k]; ok {
		return false, nil
	}
	if !cp.GetAbsent() {
		b := st.files.blobs[cp.GetSha256()]
		if b == nil {
			return false, fmt.Errorf("memjournal: file checkpoint of %q: blob %s: %w", id, cp.GetSha256(), journal.ErrNotFound)
		}
		b.desc.Touched = timestamppb.Now()
		st.files.refs[cp.GetSha256()]++
	}
	if st.files.cps[id] == nil {
		st.files.cps[id] = map[cpKey]*messages.FileCheckpoint{}
	}
	st.files.cps[id][k] = proto.Clone(cp).(*messages.FileCheckpoint)
	return true, nil
}

// FileCheckpoints implements journal.FileCheckpoints.
func (s *Store) FileCheckpoints(ctx context.Context, conversationID string, afterSeq uint64) ([]*messages.FileCheckpoint, error) {
	st, err := s.lockConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []*messages.FileCheckpoint
	for k, cp := range st.files.cps[conversationID] {
		if k.seq > afterSeq {
			out = append(out, proto.Clone(cp).(*messages.FileCheckpoint))
		}
	}
	slices.SortFunc(out, func(a, b *messages.FileCheckpoint) int {
		if a.GetSeq() != b.GetSeq() {
			if a.GetSeq() < b.GetSeq() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.GetPath(), b.GetPath())
	})
	return out, nil
}

// SweepFileBlobs implements journal.FileCheckpoints.
func (s *Store) SweepFileBlobs(ctx context.Context, olderThan time.Time) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	st, err := s.lock()
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for sum, b := range st.files.blobs {
		if st.files.refs[sum] == 0 && b.desc.GetTouched().AsTime().Before(olderThan) {
			delete(st.files.blobs, sum)
			n++
		}
	}
	return n, nil
}
