package journal_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestValidateFilePath(t *testing.T) {
	for _, p := range []string{"a", "a/b.txt", "dir/.hidden", "..a", "a..b/c"} {
		assert.NoError(t, journal.ValidateFilePath(p), p)
	}
	for _, p := range []string{"", ".", "..", "../a", "/a", "a/", "a//b", "a/./b", "a/../b", "a\x00b", "\xff", string(make([]byte, journal.MaxFilePathBytes+1))} {
		assert.ErrorIs(t, journal.ValidateFilePath(p), journal.ErrInvalid, "%q", p)
	}
}

func TestChunkBlob(t *testing.T) {
	content := bytes.Repeat([]byte{7, 8, 9}, journal.FileChunkBytes) // 3 chunks exactly
	var sizes []int
	n, err := journal.ChunkBlob(hexSum(content), int64(len(content)), bytes.NewReader(content), func(idx uint32, c []byte) error {
		require.Equal(t, uint32(len(sizes)), idx)
		sizes = append(sizes, len(c))
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, uint32(3), n)
	assert.Equal(t, []int{journal.FileChunkBytes, journal.FileChunkBytes, journal.FileChunkBytes}, sizes)
	assert.Equal(t, n, journal.ChunkCount(int64(len(content))))

	stop := errors.New("stop")
	_, err = journal.ChunkBlob(hexSum(content), int64(len(content)), bytes.NewReader(content), func(uint32, []byte) error { return stop })
	assert.ErrorIs(t, err, stop, "put's error is returned")
	_, err = journal.ChunkBlob(hexSum(nil), journal.MaxFileBlobBytes+1, bytes.NewReader(nil), nil)
	assert.ErrorIs(t, err, journal.ErrTooLarge)
	assert.ErrorIs(t, err, journal.ErrInvalid, "ErrTooLarge comes with ErrInvalid")
}

// TestBlobReaderDetectsDamage: a chunk of the wrong length or content that
// does not match its name ends the read with ErrCorrupt, never io.EOF.
func TestBlobReaderDetectsDamage(t *testing.T) {
	content := bytes.Repeat([]byte("x"), journal.FileChunkBytes+10)
	desc := &messages.FileBlob{Sha256: hexSum(content), Size: int64(len(content)), Chunks: 2}
	chunks := [][]byte{content[:journal.FileChunkBytes], content[journal.FileChunkBytes:]}
	read := func(get func(uint32) ([]byte, error)) error {
		_, err := io.Copy(io.Discard, journal.NewBlobReader(desc, get))
		return err
	}
	require.NoError(t, read(func(i uint32) ([]byte, error) { return chunks[i], nil }))
	assert.ErrorIs(t, read(func(i uint32) ([]byte, error) {
		if i == 1 {
			return []byte("short"), nil
		}
		return chunks[i], nil
	}), journal.ErrCorrupt)
	assert.ErrorIs(t, read(func(i uint32) ([]byte, error) {
		c := bytes.Clone(chunks[i])
		c[0] = 'y'
		return c, nil
	}), journal.ErrCorrupt)
	assert.ErrorIs(t, read(func(uint32) ([]byte, error) { return nil, journal.ErrNotFound }), journal.ErrNotFound)
}
