package pebblejournal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// TestCheckFiles: Check reports a store with file checkpoints sound, and a
// missing chunk, a missing blob and a stray reference as damage.
func TestCheckFiles(t *testing.T) {
	content := bytes.Repeat([]byte("z"), journal.FileChunkBytes+5)
	h := sha256.Sum256(content)
	sum := hex.EncodeToString(h[:])
	for _, tc := range []struct {
		name   string
		damage func(db *pebble.DB) error
		want   string
	}{
		{"sound", nil, ""},
		{"missing chunk", func(db *pebble.DB) error { return db.Delete(chunkKey(h[:], 1), pebble.Sync) }, "chunk 1"},
		{"missing blob", func(db *pebble.DB) error { return db.Delete(blobKey(h[:]), pebble.Sync) }, "which is missing"},
		{"stray reference", func(db *pebble.DB) error {
			return db.Set(blobRefKey(h[:], "c", 9, "x"), nil, pebble.Sync)
		}, "has no file checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openMem(t, Options{})
			appendN(t, s, "c", 0, 2)
			_, err := s.PutFileBlob(ctx, sum, int64(len(content)), bytes.NewReader(content))
			require.NoError(t, err)
			_, err = s.PutFileCheckpoint(ctx, &messages.FileCheckpoint{ConversationId: "c", Seq: 1, ToolCallId: "t", Path: "a", Sha256: sum, Size: int64(len(content))})
			require.NoError(t, err)
			_, err = s.PutFileCheckpoint(ctx, &messages.FileCheckpoint{ConversationId: "c", Seq: 2, ToolCallId: "u", Path: "b", Absent: true})
			require.NoError(t, err)
			if tc.damage != nil {
				require.NoError(t, tc.damage(s.db))
			}
			rep, err := s.Check(ctx)
			require.NoError(t, err)
			if tc.want == "" {
				require.True(t, rep.Sound(), "%v", rep.Problems)
				return
			}
			require.False(t, rep.Sound())
			require.True(t, strings.Contains(strings.Join(rep.Problems, "\n"), tc.want), "%v", rep.Problems)
		})
	}
}

// TestSweepRemovesUnfinishedUploads: chunks left without a description (an
// upload cut by a crash) are removed by the next sweep, whatever their age,
// and a finished blob of another name is kept.
func TestSweepRemovesUnfinishedUploads(t *testing.T) {
	s := openMem(t, Options{})
	kept := []byte("kept")
	hk := sha256.Sum256(kept)
	_, err := s.PutFileBlob(ctx, hex.EncodeToString(hk[:]), int64(len(kept)), bytes.NewReader(kept))
	require.NoError(t, err)
	appendN(t, s, "c", 0, 1)
	_, err = s.PutFileCheckpoint(ctx, &messages.FileCheckpoint{ConversationId: "c", Seq: 1, ToolCallId: "t", Path: "k", Sha256: hex.EncodeToString(hk[:]), Size: 4})
	require.NoError(t, err)
	cut := sha256.Sum256([]byte("cut short"))
	for i := uint32(0); i < 3; i++ {
		require.NoError(t, s.db.Set(chunkKey(cut[:], i), []byte("partial"), pebble.Sync))
	}
	n, err := s.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "an unfinished upload is not a blob")
	found := false
	require.NoError(t, s.scanKeys(chunkPrefix(cut[:]), prefixEnd(chunkPrefix(cut[:])), func([]byte) error { found = true; return nil }))
	require.False(t, found, "the unfinished upload's chunks are gone")
	rc, err := s.OpenFileBlob(ctx, hex.EncodeToString(hk[:]))
	require.NoError(t, err)
	back, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Equal(t, kept, back)
}

// putBlobs stores n blobs of distinct contents and returns their sums.
func putBlobs(t *testing.T, s *Store, n int) []string {
	t.Helper()
	var sums []string
	for i := range n {
		content := []byte(fmt.Sprint("blob ", i))
		h := sha256.Sum256(content)
		sum := hex.EncodeToString(h[:])
		_, err := s.PutFileBlob(ctx, sum, int64(len(content)), bytes.NewReader(content))
		require.NoError(t, err)
		sums = append(sums, sum)
	}
	return sums
}

// TestSweepInPages: the sweep lists and sweeps the old blobs a page at a
// time (here pages of 2), so its memory does not grow with the number of
// blobs, and still removes every old blob no record names, and only those.
func TestSweepInPages(t *testing.T) {
	defer func(p int) { sweepPage = p }(sweepPage)
	sweepPage = 2
	s := openMem(t, Options{})
	sums := putBlobs(t, s, 7)
	appendN(t, s, "c", 0, 1)
	_, err := s.PutFileCheckpoint(ctx, &messages.FileCheckpoint{ConversationId: "c", Seq: 1, ToolCallId: "t", Path: "k", Sha256: sums[3], Size: int64(len("blob 3"))})
	require.NoError(t, err)
	n, err := s.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 6, n)
	for i, sum := range sums {
		_, err := s.FileBlob(ctx, sum)
		if i == 3 {
			require.NoError(t, err, "a blob a record names is kept")
			continue
		}
		require.ErrorIs(t, err, journal.ErrNotFound, "blob %d", i)
	}
}

// endingContext is a context whose Err reports context.Canceled from its
// ok+1-th call on, and that is never done otherwise.
type endingContext struct {
	context.Context
	ok    int
	calls int
}

func (c *endingContext) Err() error {
	c.calls++
	if c.calls > c.ok {
		return context.Canceled
	}
	return nil
}

// TestSweepListingChecksItsContext: a sweep whose context ends while it
// lists the old blobs (here: the context ends after the check of the
// call's start and the listing's first blob) stops there and removes
// nothing. (The listing went through every blob before the context was
// checked again, however many there were; a Close, which ends the sweep's
// context, waited for it.)
func TestSweepListingChecksItsContext(t *testing.T) {
	s := openMem(t, Options{})
	sums := putBlobs(t, s, 5)
	c := &endingContext{Context: context.Background(), ok: 2}
	n, err := s.SweepFileBlobs(c, time.Now().Add(time.Hour))
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n)
	for _, sum := range sums {
		_, err := s.FileBlob(ctx, sum)
		require.NoError(t, err, "nothing removed")
	}
}
