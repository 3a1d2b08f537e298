package journaltest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fileCases check journal.FileCheckpoints: content-addressed blobs stored in
// chunks, checkpoint records that name them, and the sweeper.
var fileCases = []suiteCase{
	{name: "BlobRoundTripInChunks", run: testBlobRoundTrip},
	{name: "BlobDeduplicated", run: testBlobDedup},
	{name: "EmptyBlob", run: testBlobEmpty},
	{name: "BlobBadInput", run: testBlobBadInput},
	{name: "CheckpointFirstWins", run: testCheckpointFirstWins},
	{name: "CheckpointsInOrder", run: testCheckpointsOrder},
	{name: "CheckpointBadInput", run: testCheckpointBadInput},
	{name: "SweepKeepsReferenced", run: testSweepReferenced},
	{name: "DeleteDropsReferences", run: testSweepAfterDelete},
	{name: "SweepModel", run: testSweepModel},
	{name: "SweepConcurrent", run: testSweepConcurrent},
	{name: "SweptWhileRead", run: testSweptWhileRead},
	{name: "SweepCutOffExact", run: testSweepCutOffExact},
	{name: "SurvivesReopen", run: testFilesReopen, durable: true},
}

// files returns the store's FileCheckpoints, failing the test if it has
// none.
func files(t testing.TB, s journal.Store) journal.FileCheckpoints {
	t.Helper()
	f, ok := s.(journal.FileCheckpoints)
	require.True(t, ok, "the store does not implement journal.FileCheckpoints")
	return f
}

// sumOf returns the blob name of b.
func sumOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// pattern returns n bytes that differ from chunk to chunk.
func pattern(n int, salt byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/journal.FileChunkBytes) ^ salt
	}
	return b
}

// countingReader records the largest read asked of it and how many bytes
// it gave.
type countingReader struct {
	r       io.Reader
	maxRead int
	total   int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.maxRead = max(c.maxRead, len(p))
	n, err := c.r.Read(p)
	c.total += int64(n)
	return n, err
}

// failReader fails every read: a store that deduplicates must not read it.
type failReader struct{}

func (failReader) Read([]byte) (int, error) {
	return 0, errors.New("journaltest: read of a deduplicated blob")
}

func putBlob(t testing.TB, f journal.FileCheckpoints, content []byte) *messages.FileBlob {
	t.Helper()
	d, err := f.PutFileBlob(t.Context(), sumOf(content), int64(len(content)), bytes.NewReader(content))
	require.NoError(t, err)
	return d
}

// readBlob reads the blob whole through OpenFileBlob, checking that no
// Read returns more than a chunk.
func readBlob(t testing.TB, f journal.FileCheckpoints, sum string) ([]byte, error) {
	t.Helper()
	rc, err := f.OpenFileBlob(t.Context(), sum)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	var out bytes.Buffer
	buf := make([]byte, 3*journal.FileChunkBytes)
	for {
		n, err := rc.Read(buf)
		require.LessOrEqual(t, n, journal.FileChunkBytes, "one Read returned more than a chunk")
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// newConv creates a conversation with n user messages.
func newConv(t testing.TB, s journal.Store, conv string, n int) {
	t.Helper()
	appendEvents(t, s, conv, userEvs(1, n)...)
}

func fileCP(conv string, seq uint64, path string, content []byte) *messages.FileCheckpoint {
	cp := &messages.FileCheckpoint{ConversationId: conv, Seq: seq, ToolCallId: fmt.Sprintf("call-%s-%d", conv, seq), Path: path, Created: ts(1)}
	if content == nil {
		cp.Absent = true
		return cp
	}
	cp.Sha256, cp.Size, cp.Mode = sumOf(content), int64(len(content)), 0o644
	return cp
}

func putCP(t testing.TB, f journal.FileCheckpoints, cp *messages.FileCheckpoint) bool {
	t.Helper()
	ok, err := f.PutFileCheckpoint(t.Context(), cp)
	require.NoError(t, err)
	return ok
}

func testBlobRoundTrip(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	content := pattern(3*journal.FileChunkBytes+1234, 1)
	cr := &countingReader{r: bytes.NewReader(content)}
	d, err := f.PutFileBlob(t.Context(), sumOf(content), int64(len(content)), cr)
	require.NoError(t, err)
	// Memory is bounded by the chunk: the store never asked for more than
	// a chunk at once, and keeps the content in ChunkCount chunks.
	assert.LessOrEqual(t, cr.maxRead, journal.FileChunkBytes)
	assert.Equal(t, int64(len(content)), cr.total)
	assert.Equal(t, sumOf(content), d.GetSha256())
	assert.Equal(t, int64(len(content)), d.GetSize())
	assert.Equal(t, uint32(4), d.GetChunks())
	assert.Equal(t, journal.ChunkCount(int64(len(content))), d.GetChunks())
	got, err := f.FileBlob(t.Context(), sumOf(content))
	require.NoError(t, err)
	assert.Equal(t, d.GetSize(), got.GetSize())
	assert.Equal(t, d.GetChunks(), got.GetChunks())
	back, err := readBlob(t, f, sumOf(content))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, back), "blob read back differs")
}

func testBlobDedup(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	content := pattern(journal.FileChunkBytes+1, 2)
	first := putBlob(t, f, content)
	again, err := f.PutFileBlob(t.Context(), sumOf(content), int64(len(content)), failReader{})
	require.NoError(t, err, "a stored blob is not read again")
	assert.Equal(t, first.GetChunks(), again.GetChunks())
	assert.False(t, again.GetTouched().AsTime().Before(first.GetTouched().AsTime()), "dedup touches the blob")
	before, err := f.FileBlob(t.Context(), sumOf(content))
	require.NoError(t, err)
	_, err = f.PutFileBlob(t.Context(), sumOf(content), int64(len(content))+1, failReader{})
	requireSentinel(t, err, journal.ErrInvalid, "a size that is not the stored blob's")
	after, err := f.FileBlob(t.Context(), sumOf(content))
	require.NoError(t, err)
	requireProto(t, before, after, "a refused put does not touch the stored blob")
}

func testBlobEmpty(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	d := putBlob(t, f, nil)
	assert.Equal(t, uint32(0), d.GetChunks())
	back, err := readBlob(t, f, sumOf(nil))
	require.NoError(t, err)
	assert.Empty(t, back)
}

func testBlobBadInput(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	content := pattern(journal.FileChunkBytes*2+5, 3)
	other := sumOf([]byte("other"))
	cases := []struct {
		name string
		sum  string
		size int64
		r    io.Reader
		want error
	}{
		{"wrong sum", other, int64(len(content)), bytes.NewReader(content), journal.ErrInvalid},
		{"not hex", "xyz", 3, bytes.NewReader([]byte("xyz")), journal.ErrInvalid},
		{"upper-case hex", "A" + sumOf(content)[1:], int64(len(content)), bytes.NewReader(content), journal.ErrInvalid},
		{"shorter than declared", sumOf(content), int64(len(content)) + 1, bytes.NewReader(content), journal.ErrInvalid},
		{"longer than declared", sumOf(content[:10]), 10, bytes.NewReader(content), journal.ErrInvalid},
		{"negative size", sumOf(nil), -1, bytes.NewReader(nil), journal.ErrInvalid},
		{"too large", other, journal.MaxFileBlobBytes + 1, failReader{}, journal.ErrTooLarge},
	}
	for _, c := range cases {
		_, err := f.PutFileBlob(ctx, c.sum, c.size, c.r)
		require.ErrorIs(t, err, c.want, c.name)
		if journal.ValidateBlobSum(c.sum) == nil {
			_, err = f.FileBlob(ctx, c.sum)
			requireSentinel(t, err, journal.ErrNotFound, "%s: nothing stored", c.name)
		}
	}
	_, err := f.FileBlob(ctx, sumOf(content))
	requireSentinel(t, err, journal.ErrNotFound)
	_, err = f.OpenFileBlob(ctx, sumOf(content))
	requireSentinel(t, err, journal.ErrNotFound)
	_, err = f.FileBlob(ctx, "nope")
	requireSentinel(t, err, journal.ErrInvalid)
	// A failed upload leaves nothing a sweep counts as a blob.
	n, err := f.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Zero(t, n)
}

// testCheckpointFirstWins: the first record of a (conversation, seq, path)
// is kept; a later one is not stored, false and nil, whatever its blob.
func testCheckpointFirstWins(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	newConv(t, h.Store, "c", 3)
	before, after := []byte("before"), []byte("after")
	putBlob(t, f, before)
	putBlob(t, f, after)
	require.True(t, putCP(t, f, fileCP("c", 2, "a.txt", before)))
	require.False(t, putCP(t, f, fileCP("c", 2, "a.txt", after)), "a second record of the same call and path is not stored")
	// An existing record wins without cp's blob being looked at: one never
	// stored, or none (an absent file), is no error.
	require.False(t, putCP(t, f, fileCP("c", 2, "a.txt", []byte("never stored"))), "a record exists: its blob is not looked up")
	require.False(t, putCP(t, f, fileCP("c", 2, "a.txt", nil)), "a record exists: an absent file is not stored either")
	cps, err := f.FileCheckpoints(t.Context(), "c", 0)
	require.NoError(t, err)
	require.Len(t, cps, 1)
	assert.Equal(t, sumOf(before), cps[0].GetSha256())
	assert.Equal(t, uint32(0o644), cps[0].GetMode())
	assert.Equal(t, "call-c-2", cps[0].GetToolCallId())
}

func testCheckpointsOrder(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	newConv(t, h.Store, "c", 9)
	newConv(t, h.Store, "d", 1)
	x := []byte("x")
	putBlob(t, f, x)
	for _, cp := range []*messages.FileCheckpoint{
		fileCP("c", 7, "b", x), fileCP("c", 3, "z/y", nil), fileCP("c", 3, "a", x), fileCP("c", 5, "a", nil), fileCP("d", 1, "a", x),
	} {
		require.True(t, putCP(t, f, cp))
	}
	cps, err := f.FileCheckpoints(t.Context(), "c", 0)
	require.NoError(t, err)
	var got []string
	for _, cp := range cps {
		got = append(got, fmt.Sprintf("%d:%s:%v", cp.GetSeq(), cp.GetPath(), cp.GetAbsent()))
	}
	assert.Equal(t, []string{"3:a:false", "3:z/y:true", "5:a:true", "7:b:false"}, got)
	cps, err = f.FileCheckpoints(t.Context(), "c", 3)
	require.NoError(t, err)
	assert.Len(t, cps, 2, "afterSeq is exclusive")
	cps, err = f.FileCheckpoints(t.Context(), "unknown", 0)
	require.NoError(t, err)
	assert.Empty(t, cps)
}

func testCheckpointBadInput(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	newConv(t, h.Store, "c", 2)
	x := []byte("x")
	putBlob(t, f, x)
	mod := func(m func(*messages.FileCheckpoint)) *messages.FileCheckpoint {
		cp := fileCP("c", 1, "a", x)
		m(cp)
		return cp
	}
	invalid := map[string]*messages.FileCheckpoint{
		"nil":              nil,
		"no conversation":  mod(func(cp *messages.FileCheckpoint) { cp.ConversationId = "" }),
		"no call":          mod(func(cp *messages.FileCheckpoint) { cp.ToolCallId = "" }),
		"seq 0":            mod(func(cp *messages.FileCheckpoint) { cp.Seq = 0 }),
		"empty path":       mod(func(cp *messages.FileCheckpoint) { cp.Path = "" }),
		"absolute path":    mod(func(cp *messages.FileCheckpoint) { cp.Path = "/etc/passwd" }),
		"escaping path":    mod(func(cp *messages.FileCheckpoint) { cp.Path = "../x" }),
		"unclean path":     mod(func(cp *messages.FileCheckpoint) { cp.Path = "a/../b" }),
		"NUL in path":      mod(func(cp *messages.FileCheckpoint) { cp.Path = "a\x00b" }),
		"bad sum":          mod(func(cp *messages.FileCheckpoint) { cp.Sha256 = "00" }),
		"absent with blob": mod(func(cp *messages.FileCheckpoint) { cp.Absent = true }),
		"negative size":    mod(func(cp *messages.FileCheckpoint) { cp.Size = -1 }),
		// Held to journal.CheckTime, as every stored time.
		"created in year 10000": mod(func(cp *messages.FileCheckpoint) { cp.Created = year10000 }),
		"absent, created before year 1": mod(func(cp *messages.FileCheckpoint) {
			cp.Absent, cp.Sha256, cp.Size, cp.Created = true, "", 0, beforeYear1
		}),
	}
	for name, cp := range invalid {
		_, err := f.PutFileCheckpoint(ctx, cp)
		requireSentinel(t, err, journal.ErrInvalid, name)
	}
	_, err := f.PutFileCheckpoint(ctx, fileCP("c", 1, "a", []byte("never stored")))
	requireSentinel(t, err, journal.ErrNotFound, "unknown blob")
	_, err = f.PutFileCheckpoint(ctx, fileCP("nobody", 1, "a", x))
	requireSentinel(t, err, journal.ErrNotFound, "no conversation row")
	require.NoError(t, h.Store.DeleteConversation(ctx, "c"))
	_, err = f.PutFileCheckpoint(ctx, fileCP("c", 1, "a", x))
	requireSentinel(t, err, journal.ErrDeleted)
	cps, err := f.FileCheckpoints(ctx, "c", 0)
	if err == nil {
		assert.Empty(t, cps)
	} else {
		requireSentinel(t, err, journal.ErrDeleted)
	}
}

// testSweptWhileRead: a blob that SweepFileBlobs removes while a reader
// of it is open gives, from the next Read that needs a chunk, an error
// wrapping ErrNotFound (not ErrCorrupt, not the content).
func testSweptWhileRead(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	content := pattern(journal.FileChunkBytes+10, 5)
	putBlob(t, f, content)
	rc, err := f.OpenFileBlob(ctx, sumOf(content))
	require.NoError(t, err)
	defer func() { _ = rc.Close() }()
	first := make([]byte, journal.FileChunkBytes)
	_, err = io.ReadFull(rc, first)
	require.NoError(t, err, "the first chunk, read before the sweep")
	assert.Equal(t, content[:journal.FileChunkBytes], first)
	n, err := f.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the blob no record names is removed")
	_, err = io.ReadAll(rc)
	requireSentinel(t, err, journal.ErrNotFound, "the rest of a blob removed while it was read")
}

// testSweepCutOffExact: PutFileBlob returns the description FileBlob
// reads back, its touched time included, and SweepFileBlobs removes a blob
// touched before olderThan, to the nanosecond: touched exactly at
// olderThan stays, a nanosecond later it goes.
func testSweepCutOffExact(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	d := putBlob(t, f, []byte("b"))
	stored, err := f.FileBlob(ctx, sumOf([]byte("b")))
	require.NoError(t, err)
	requireProto(t, d, stored, "the description PutFileBlob returned is the one stored")
	at := stored.GetTouched().AsTime()
	n, err := f.SweepFileBlobs(ctx, at)
	require.NoError(t, err)
	assert.Zero(t, n, "touched exactly at olderThan is not before it")
	n, err = f.SweepFileBlobs(ctx, at.Add(time.Nanosecond))
	require.NoError(t, err)
	assert.Equal(t, 1, n, "touched a nanosecond before olderThan")
}

func testSweepReferenced(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	newConv(t, h.Store, "c", 2)
	kept, dropped := pattern(journal.FileChunkBytes+9, 4), pattern(journal.FileChunkBytes+9, 5)
	putBlob(t, f, kept)
	putBlob(t, f, dropped)
	putCP(t, f, fileCP("c", 1, "a", kept))
	// A TTL protects blobs touched after the cut-off, referenced or not.
	n, err := f.SweepFileBlobs(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	assert.Zero(t, n)
	n, err = f.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	back, err := readBlob(t, f, sumOf(kept))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(kept, back))
	_, err = f.FileBlob(ctx, sumOf(dropped))
	requireSentinel(t, err, journal.ErrNotFound)
	_, err = f.OpenFileBlob(ctx, sumOf(dropped))
	requireSentinel(t, err, journal.ErrNotFound)
	// A blob stored again after a sweep is whole again.
	putBlob(t, f, dropped)
	back, err = readBlob(t, f, sumOf(dropped))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(dropped, back))
}

func testSweepAfterDelete(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	newConv(t, h.Store, "c", 2)
	newConv(t, h.Store, "d", 2)
	shared, own := []byte("shared"), []byte("own")
	putBlob(t, f, shared)
	putBlob(t, f, own)
	putCP(t, f, fileCP("c", 1, "a", shared))
	putCP(t, f, fileCP("c", 2, "b", own))
	putCP(t, f, fileCP("d", 1, "a", shared))
	require.NoError(t, h.Store.DeleteConversation(ctx, "c"))
	n, err := f.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the deleted conversation's own blob goes")
	_, err = f.FileBlob(ctx, sumOf(own))
	requireSentinel(t, err, journal.ErrNotFound)
	_, err = f.FileBlob(ctx, sumOf(shared))
	require.NoError(t, err, "a blob another conversation names stays")
	require.NoError(t, h.Store.DeleteConversation(ctx, "d"))
	n, err = f.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = f.FileBlob(ctx, sumOf(shared))
	requireSentinel(t, err, journal.ErrNotFound)
}

// testSweepModel runs random puts, checkpoints, deletes and sweeps against a
// model of the references, and checks after every sweep that each blob a
// record names is whole and each blob none names is gone.
func testSweepModel(t *testing.T, e env) {
	rng := newRand(seed(t))
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	contents := make([][]byte, 6)
	for i := range contents {
		contents[i] = pattern(rng.IntN(2*journal.FileChunkBytes), byte(10+i))
	}
	convs := []string{"a", "b", "c", "d"}
	type ref struct {
		conv string
		seq  uint64
		path string
	}
	refs := map[ref]int{}    // record -> content index
	stored := map[int]bool{} // content index -> stored (per the model)
	deleted := map[string]bool{}
	created := map[string]bool{}
	ops := opsCount(t) / 10
	for i := 0; i < ops; i++ {
		switch op := rng.IntN(10); {
		case op < 3:
			c := rng.IntN(len(contents))
			putBlob(t, f, contents[c])
			stored[c] = true
		case op < 7:
			conv := convs[rng.IntN(len(convs))]
			if deleted[conv] {
				continue
			}
			if !created[conv] {
				newConv(t, h.Store, conv, 5)
				created[conv] = true
			}
			c := rng.IntN(len(contents))
			r := ref{conv, uint64(1 + rng.IntN(5)), fmt.Sprintf("p%d", rng.IntN(3))}
			ok, err := f.PutFileCheckpoint(ctx, fileCP(conv, r.seq, r.path, contents[c]))
			if _, had := refs[r]; had {
				require.NoError(t, err, "op %d", i)
				require.False(t, ok, "op %d: first record wins", i)
				continue
			}
			if !stored[c] {
				requireSentinel(t, err, journal.ErrNotFound, "op %d: record of a blob not stored", i)
				continue
			}
			require.NoError(t, err, "op %d", i)
			require.True(t, ok, "op %d: a new record is stored", i)
			refs[r] = c
		case op < 8:
			conv := convs[rng.IntN(len(convs))]
			if !created[conv] || deleted[conv] {
				continue
			}
			require.NoError(t, h.Store.DeleteConversation(ctx, conv))
			deleted[conv] = true
			for r := range refs {
				if r.conv == conv {
					delete(refs, r)
				}
			}
		default:
			_, err := f.SweepFileBlobs(ctx, time.Now().Add(time.Hour))
			require.NoError(t, err)
			named := map[int]bool{}
			for _, c := range refs {
				named[c] = true
			}
			for c := range contents {
				_, err := f.FileBlob(ctx, sumOf(contents[c]))
				if named[c] {
					require.NoError(t, err, "op %d: a referenced blob was swept", i)
					back, err := readBlob(t, f, sumOf(contents[c]))
					require.NoError(t, err)
					require.True(t, bytes.Equal(contents[c], back), "op %d: blob content", i)
				} else {
					requireSentinel(t, err, journal.ErrNotFound, "op %d: an unreferenced blob was kept", i)
					stored[c] = false
				}
			}
		}
	}
	// The records a conversation lists are the model's.
	for _, conv := range convs {
		if !created[conv] || deleted[conv] {
			continue
		}
		cps, err := f.FileCheckpoints(ctx, conv, 0)
		require.NoError(t, err)
		var got, want []string
		for _, cp := range cps {
			got = append(got, fmt.Sprintf("%d/%s/%s", cp.GetSeq(), cp.GetPath(), cp.GetSha256()))
		}
		for r, c := range refs {
			if r.conv == conv {
				want = append(want, fmt.Sprintf("%d/%s/%s", r.seq, r.path, sumOf(contents[c])))
			}
		}
		slices.Sort(want)
		assert.Equal(t, want, got, "records of %s", conv)
	}
}

// testSweepConcurrent sweeps with no TTL while writers store blobs and
// records: a record's PutFileCheckpoint may fail with ErrNotFound (its blob
// was swept first), but every record stored names a blob that is whole.
func testSweepConcurrent(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	ctx := t.Context()
	newConv(t, h.Store, "c", 50)
	contents := [][]byte{[]byte("one"), []byte("two"), pattern(journal.FileChunkBytes+3, 9)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	sweepErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				sweepErr <- nil
				return
			default:
			}
			if _, err := f.SweepFileBlobs(ctx, time.Now().Add(time.Hour)); err != nil {
				sweepErr <- err
				return
			}
		}
	}()
	stored := 0
	for seq := uint64(1); seq <= 50; seq++ {
		c := contents[seq%uint64(len(contents))]
		putBlob(t, f, c)
		_, err := f.PutFileCheckpoint(ctx, fileCP("c", seq, "f", c))
		if errors.Is(err, journal.ErrNotFound) {
			continue
		}
		require.NoError(t, err)
		stored++
	}
	close(stop)
	wg.Wait()
	require.NoError(t, <-sweepErr)
	cps, err := f.FileCheckpoints(ctx, "c", 0)
	require.NoError(t, err)
	assert.Len(t, cps, stored)
	for _, cp := range cps {
		back, err := readBlob(t, f, cp.GetSha256())
		require.NoError(t, err, "record at seq %d names a swept blob", cp.GetSeq())
		assert.Equal(t, cp.GetSha256(), sumOf(back))
	}
}

func testFilesReopen(t *testing.T, e env) {
	h := e.open(t)
	f := files(t, h.Store)
	newConv(t, h.Store, "c", 2)
	content := pattern(2*journal.FileChunkBytes+1, 6)
	putBlob(t, f, content)
	putCP(t, f, fileCP("c", 2, "dir/a", content))
	s := h.Reopen(t)
	f = files(t, s)
	cps, err := f.FileCheckpoints(context.Background(), "c", 0)
	require.NoError(t, err)
	require.Len(t, cps, 1)
	assert.Equal(t, "dir/a", cps[0].GetPath())
	back, err := readBlob(t, f, sumOf(content))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, back))
}
