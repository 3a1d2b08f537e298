package pebblejournal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
