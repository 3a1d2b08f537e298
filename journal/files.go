package journal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/messages"
)

// Limits of file checkpoints.
const (
	// FileChunkBytes is the size of the chunks a blob is stored and read
	// in (the last chunk of a blob may be shorter). An adapter holds at
	// most one chunk of a blob in memory at a time, whatever its size.
	FileChunkBytes = 256 << 10
	// MaxFileBlobBytes bounds one blob. A longer content is refused with
	// an error wrapping ErrTooLarge (and ErrInvalid).
	MaxFileBlobBytes = 1 << 30
	// MaxFilePathBytes bounds the path of a file checkpoint.
	MaxFilePathBytes = 4096
)

// ErrTooLarge: a file blob exceeds MaxFileBlobBytes (or a smaller limit the
// caller set). Errors that wrap it also wrap ErrInvalid. Nothing was
// written.
var ErrTooLarge = errors.New("journal: file blob too large")

// FileCheckpoints is the optional part of a Store that keeps file
// checkpoints: the content a file had before a server tool call changed
// it, as content-addressed, deduplicated blobs (named by their SHA-256,
// stored in chunks of FileChunkBytes), and one checkpoint record per
// (conversation, seq of the tool call, path) that refers to its blob. The
// runtime finds it by type assertion; every adapter of this module
// implements it.
//
// A blob is referenced while a checkpoint record names it. Records go with
// their conversation (DeleteConversation removes them in its atomic
// write); SweepFileBlobs removes the blobs no record names.
//
// Concurrency: every method is safe for concurrent use, also with
// DeleteConversation and SweepFileBlobs: a blob named by a record that
// PutFileCheckpoint wrote is never removed while the record exists.
type FileCheckpoints interface {
	// PutFileBlob stores the size bytes r yields as the blob named sum
	// (the lowercase hex SHA-256 of the content) and returns its
	// description. It reads r in chunks of FileChunkBytes and keeps at most
	// one in memory. If the blob is already stored it does not read r: it
	// only marks the blob touched now (deduplication). A size above
	// MaxFileBlobBytes is refused before r is read, with an error wrapping
	// ErrTooLarge. If sum is not 64 lowercase hex digits, size is negative,
	// r yields more or fewer than size bytes, or the content's SHA-256 is
	// not sum, the error wraps ErrInvalid (so does a size that is not the
	// stored blob's). In every error case the blob is not stored, and a
	// blob already stored is not touched (a durable adapter may leave
	// chunks of it that only SweepFileBlobs sees, and removes).
	PutFileBlob(ctx context.Context, sum string, size int64, r io.Reader) (*messages.FileBlob, error)

	// FileBlob returns the description of the blob sum, or ErrNotFound.
	FileBlob(ctx context.Context, sum string) (*messages.FileBlob, error)

	// OpenFileBlob returns a reader of the blob's content, which reads the
	// Store one chunk at a time, or ErrNotFound. The reader verifies the
	// content against its name at the end and returns an error wrapping
	// ErrCorrupt instead of io.EOF if it does not match. The caller closes
	// it. A blob removed while it is read gives an error wrapping
	// ErrNotFound from Read.
	OpenFileBlob(ctx context.Context, sum string) (io.ReadCloser, error)

	// PutFileCheckpoint stores cp unless a record with its conversation,
	// seq and path exists: the first record of a (conversation, seq, path)
	// wins, so a tool re-run after a crash keeps the content from before
	// the first run. It reports whether it stored cp; when a record
	// exists it returns false and nil without looking at cp's blob. Else
	// cp's blob (unless cp.Absent) must be stored (ErrNotFound otherwise)
	// and is touched.
	// The conversation must have a row (ErrNotFound) and not be deleted
	// (ErrDeleted). A record that breaks ValidateFileCheckpoint is
	// ErrInvalid.
	PutFileCheckpoint(ctx context.Context, cp *messages.FileCheckpoint) (bool, error)

	// FileCheckpoints returns the conversation's records with a seq
	// greater than afterSeq, ordered by seq then path. An unknown
	// conversation has none.
	FileCheckpoints(ctx context.Context, conversationID string, afterSeq uint64) ([]*messages.FileCheckpoint, error)

	// SweepFileBlobs removes every blob that no checkpoint record names and
	// that was last touched before olderThan, and the chunks of uploads
	// that never completed, and returns how many blobs it removed. The TTL
	// (now minus olderThan) is the grace an upload has between
	// PutFileBlob and its PutFileCheckpoint.
	SweepFileBlobs(ctx context.Context, olderThan time.Time) (int, error)
}

// ValidateBlobSum checks that sum names a blob: 64 lowercase hex digits.
func ValidateBlobSum(sum string) error {
	if len(sum) != 2*sha256.Size {
		return Invalidf("blob name %q is not a SHA-256 in hex", sum)
	}
	for i := 0; i < len(sum); i++ {
		if c := sum[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return Invalidf("blob name %q is not a SHA-256 in lowercase hex", sum)
		}
	}
	return nil
}

// ValidateFilePath checks a checkpoint's path: 1..MaxFilePathBytes bytes of
// UTF-8 without NUL, relative, clean (path.Clean leaves it unchanged) and
// not above its root ("..", "../x").
func ValidateFilePath(p string) error {
	switch {
	case p == "":
		return Invalidf("empty file path")
	case len(p) > MaxFilePathBytes:
		return Invalidf("file path of %d bytes exceeds %d", len(p), MaxFilePathBytes)
	case !utf8.ValidString(p):
		return Invalidf("file path %q is not valid UTF-8", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == 0 {
			return Invalidf("file path %q holds NUL", p)
		}
	}
	if path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || len(p) > 2 && p[:3] == "../" {
		return Invalidf("file path %q is not a clean relative path", p)
	}
	return nil
}

// ValidateFileCheckpoint checks a record before it is stored: its ids, a
// seq, a clean relative path, a blob of a valid sum and size unless the
// file was absent (then none), and a created time unset or valid
// (CheckTime).
func ValidateFileCheckpoint(cp *messages.FileCheckpoint) error {
	if cp == nil {
		return Invalidf("nil file checkpoint")
	}
	if err := ValidateID("conversation id", cp.GetConversationId()); err != nil {
		return err
	}
	if err := ValidateID("tool call id", cp.GetToolCallId()); err != nil {
		return err
	}
	if cp.GetSeq() == 0 {
		return Invalidf("file checkpoint at seq 0")
	}
	if err := ValidateFilePath(cp.GetPath()); err != nil {
		return err
	}
	if err := CheckTime("file checkpoint of "+cp.GetPath()+": created", cp.GetCreated()); err != nil {
		return err
	}
	if cp.GetAbsent() {
		if cp.GetSha256() != "" || cp.GetSize() != 0 {
			return Invalidf("file checkpoint of an absent file names a blob")
		}
		return nil
	}
	if err := ValidateBlobSum(cp.GetSha256()); err != nil {
		return err
	}
	if cp.GetSize() < 0 || cp.GetSize() > MaxFileBlobBytes {
		return Invalidf("file checkpoint size %d out of range", cp.GetSize())
	}
	return nil
}

// TooLargef returns an error wrapping ErrTooLarge and ErrInvalid.
func TooLargef(format string, args ...any) error {
	return fmt.Errorf("%s: %w (%w)", fmt.Sprintf(format, args...), ErrTooLarge, ErrInvalid)
}

// ChunkBlob reads the size bytes of r in chunks of FileChunkBytes (one
// buffer, reused) and calls put for each, with its index from 0; put must
// copy the chunk if it keeps it. It refuses a size above MaxFileBlobBytes
// (ErrTooLarge) before reading, content longer or shorter than size, and
// content whose SHA-256 is not sum (ErrInvalid). It returns the number of
// chunks: ChunkCount(size), zero for an empty content.
func ChunkBlob(sum string, size int64, r io.Reader, put func(idx uint32, chunk []byte) error) (uint32, error) {
	if err := ValidateBlobSum(sum); err != nil {
		return 0, err
	}
	if size < 0 {
		return 0, Invalidf("blob %s: negative size %d", sum, size)
	}
	if size > MaxFileBlobBytes {
		return 0, TooLargef("blob %s of %d bytes exceeds %d", sum, size, MaxFileBlobBytes)
	}
	h := sha256.New()
	buf := make([]byte, min(int64(FileChunkBytes), size+1))
	var read int64
	var chunks uint32
	for {
		want := min(int64(len(buf)), size-read)
		if want == 0 {
			break
		}
		n, rerr := io.ReadFull(r, buf[:want])
		if n > 0 {
			read += int64(n)
			h.Write(buf[:n])
			if err := put(chunks, buf[:n]); err != nil {
				return 0, err
			}
			chunks++
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return 0, Invalidf("blob %s: content of %d bytes, %d declared", sum, read, size)
		}
		if rerr != nil {
			return 0, fmt.Errorf("journal: read blob %s: %w", sum, rerr)
		}
	}
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n > 0 {
		return 0, Invalidf("blob %s: content longer than the %d bytes declared", sum, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return 0, Invalidf("blob content has SHA-256 %s, not %s", got, sum)
	}
	return chunks, nil
}

// ChunkCount returns the number of chunks of a blob of size bytes.
func ChunkCount(size int64) uint32 {
	return uint32((size + FileChunkBytes - 1) / FileChunkBytes)
}

// NewBlobReader returns the reader of a blob described by b whose chunks
// get returns, one call per chunk, in order: what OpenFileBlob returns in
// every adapter. It checks each chunk's length against b and the content's
// SHA-256 at the end (ErrCorrupt).
func NewBlobReader(b *messages.FileBlob, get func(idx uint32) ([]byte, error)) io.ReadCloser {
	return &blobReader{b: b, get: get, h: sha256.New()}
}

type blobReader struct {
	b    *messages.FileBlob
	get  func(uint32) ([]byte, error)
	h    hash.Hash
	next uint32
	cur  []byte
	read int64
	err  error
}

func (r *blobReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.next >= r.b.GetChunks() {
			switch {
			case r.read != r.b.GetSize():
				r.err = Corruptf("blob %s: %d bytes read, %d expected", r.b.GetSha256(), r.read, r.b.GetSize())
			case hex.EncodeToString(r.h.Sum(nil)) != r.b.GetSha256():
				r.err = Corruptf("blob %s: content does not match its SHA-256", r.b.GetSha256())
			default:
				r.err = io.EOF
			}
			return 0, r.err
		}
		c, err := r.get(r.next)
		if err != nil {
			r.err = err
			return 0, err
		}
		want := int64(FileChunkBytes)
		if rest := r.b.GetSize() - r.read; rest < want {
			want = rest
		}
		if int64(len(c)) != want {
			r.err = Corruptf("blob %s: chunk %d has %d bytes, %d expected", r.b.GetSha256(), r.next, len(c), want)
			return 0, r.err
		}
		r.next++
		r.read += int64(len(c))
		r.h.Write(c)
		r.cur = c
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *blobReader) Close() error {
	r.cur, r.err = nil, errors.New("journal: blob reader closed")
	return nil
}
