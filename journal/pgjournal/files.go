package pgjournal

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var _ journal.FileCheckpoints = (*Store)(nil)

// blobLockClass is the first key of a blob's advisory lock (two-key form,
// which never meets the conversation locks' one-key form).
const blobLockClass = 0x4c7a4642

// lockBlob takes the blob's advisory lock for the rest of tx: its upload,
// the records that name it and its sweep do not interleave.
func lockBlob(ctx context.Context, tx pgx.Tx, raw []byte) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", int32(blobLockClass), int32(binary.BigEndian.Uint32(raw)))
	return err
}

func rawSum(sum string) ([]byte, error) {
	if err := journal.ValidateBlobSum(sum); err != nil {
		return nil, fmt.Errorf("pgjournal: %w", err)
	}
	raw, _ := hex.DecodeString(sum)
	return raw, nil
}

// PutFileBlob implements journal.FileCheckpoints: one transaction writes
// the blob's row and its chunks, one statement per chunk, so nothing stays
// of an upload that fails.
func (s *Store) PutFileBlob(ctx context.Context, sum string, size int64, r io.Reader) (*messages.FileBlob, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	raw, err := rawSum(sum)
	if err != nil {
		return nil, err
	}
	if size > journal.MaxFileBlobBytes {
		return nil, fmt.Errorf("pgjournal: %w", journal.TooLargef("blob %s of %d bytes exceeds %d", sum, size, journal.MaxFileBlobBytes))
	}
	// touched is a timestamptz, of whole microseconds: the description
	// returned says the time stored.
	now := time.Now().Truncate(time.Microsecond)
	var d *messages.FileBlob
	// Once: fn consumes r, which a rerun could not read again.
	err = s.writeTxOnce(ctx, "put blob", "", func(tx pgx.Tx) error {
		if err := lockBlob(ctx, tx, raw); err != nil {
			return err
		}
		var have int64
		var chunks int32
		err := tx.QueryRow(ctx, "UPDATE lz_file_blobs SET touched = $2 WHERE sha256 = $1 RETURNING size, chunks", raw, now).Scan(&have, &chunks)
		if err == nil {
			if have != size {
				return journal.Invalidf("blob %s has %d bytes, %d declared", sum, have, size)
			}
			d = &messages.FileBlob{Sha256: sum, Size: have, Chunks: uint32(chunks), Touched: timestamppb.New(now)}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		n := journal.ChunkCount(size)
		if _, err := tx.Exec(ctx, "INSERT INTO lz_file_blobs (sha256, size, chunks, touched) VALUES ($1, $2, $3, $4)", raw, size, int32(n), now); err != nil {
			return err
		}
		if _, err := journal.ChunkBlob(sum, size, r, func(idx uint32, c []byte) error {
			_, err := tx.Exec(ctx, "INSERT INTO lz_file_chunks (sha256, idx, data) VALUES ($1, $2, $3)", raw, int32(idx), c)
			return err
		}); err != nil {
			return err
		}
		d = &messages.FileBlob{Sha256: sum, Size: size, Chunks: n, Touched: timestamppb.New(now)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// FileBlob implements journal.FileCheckpoints.
func (s *Store) FileBlob(ctx context.Context, sum string) (*messages.FileBlob, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	raw, err := rawSum(sum)
	if err != nil {
		return nil, err
	}
	var size int64
	var chunks int32
	var touched time.Time
	err = s.pool.QueryRow(ctx, "SELECT size, chunks, touched FROM lz_file_blobs WHERE sha256 = $1", raw).Scan(&size, &chunks, &touched)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgjournal: blob %s: %w", sum, journal.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap(ctx, "blob", err)
	}
	if size < 0 || uint32(chunks) != journal.ChunkCount(size) {
		return nil, journal.Corruptf("pgjournal: blob %s of %d bytes in %d chunks", sum, size, chunks)
	}
	return &messages.FileBlob{Sha256: sum, Size: size, Chunks: uint32(chunks), Touched: timestamppb.New(touched)}, nil
}

// OpenFileBlob implements journal.FileCheckpoints: each Read past the
// current chunk reads the next one with one query.
func (s *Store) OpenFileBlob(ctx context.Context, sum string) (io.ReadCloser, error) {
	d, err := s.FileBlob(ctx, sum)
	if err != nil {
		return nil, err
	}
	raw, _ := hex.DecodeString(sum)
	return journal.NewBlobReader(d, func(idx uint32) ([]byte, error) {
		c, cancel, err := s.enter(ctx)
		if err != nil {
			return nil, err
		}
		defer cancel()
		var data []byte
		err = s.pool.QueryRow(c, "SELECT data FROM lz_file_chunks WHERE sha256 = $1 AND idx = $2", raw, int32(idx)).Scan(&data)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("pgjournal: blob %s chunk %d: %w", sum, idx, journal.ErrNotFound)
		}
		if err != nil {
			return nil, s.wrap(c, "blob chunk", err)
		}
		return data, nil
	}), nil
}

// PutFileCheckpoint implements journal.FileCheckpoints.
func (s *Store) PutFileCheckpoint(ctx context.Context, cp *messages.FileCheckpoint) (bool, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	if err := journal.ValidateFileCheckpoint(cp); err != nil {
		return false, fmt.Errorf("pgjournal: %w", err)
	}
	id := cp.GetConversationId()
	data, err := proto.Marshal(cp)
	if err != nil {
		return false, fmt.Errorf("pgjournal: encode file checkpoint: %w", err)
	}
	stored := false
	err = s.writeTx(ctx, "put file checkpoint", id, func(tx pgx.Tx) error {
		stored = false // a rerun (writeTx) reports its own write
		var deleted, hasRow bool
		err := tx.QueryRow(ctx, "SELECT deleted, row IS NOT NULL FROM lz_conversations WHERE id = $1", []byte(id)).Scan(&deleted, &hasRow)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if deleted {
			return fmt.Errorf("file checkpoint of %q: %w", id, journal.ErrDeleted)
		}
		if !hasRow {
			return fmt.Errorf("file checkpoint of %q: %w", id, journal.ErrNotFound)
		}
		var one int
		err = tx.QueryRow(ctx, "SELECT 1 FROM lz_file_checkpoints WHERE conv = $1 AND seq = $2 AND path = $3", []byte(id), toInt64(cp.GetSeq()), []byte(cp.GetPath())).Scan(&one)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var sum []byte
		if !cp.GetAbsent() {
			sum, _ = hex.DecodeString(cp.GetSha256())
			if err := lockBlob(ctx, tx, sum); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, "UPDATE lz_file_blobs SET touched = $2 WHERE sha256 = $1", sum, time.Now())
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("file checkpoint of %q: blob %s: %w", id, cp.GetSha256(), journal.ErrNotFound)
			}
		}
		if _, err := tx.Exec(ctx, "INSERT INTO lz_file_checkpoints (conv, seq, path, sha256, data) VALUES ($1, $2, $3, $4, $5)",
			[]byte(id), toInt64(cp.GetSeq()), []byte(cp.GetPath()), sum, data); err != nil {
			return err
		}
		stored = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return stored, nil
}

// FileCheckpoints implements journal.FileCheckpoints.
func (s *Store) FileCheckpoints(ctx context.Context, conversationID string, afterSeq uint64) ([]*messages.FileCheckpoint, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := validConv(conversationID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT seq, path, data FROM lz_file_checkpoints WHERE conv = $1 AND seq > $2 ORDER BY seq, path", []byte(conversationID), toInt64(afterSeq))
	if err != nil {
		return nil, s.wrap(ctx, "file checkpoints", err)
	}
	defer rows.Close()
	var out []*messages.FileCheckpoint
	for rows.Next() {
		var seq int64
		var path, data []byte
		if err := rows.Scan(&seq, &path, &data); err != nil {
			return nil, s.wrap(ctx, "file checkpoints", err)
		}
		cp, err := decodeFileCheckpoint(data, conversationID, seq, string(path))
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "file checkpoints", err)
	}
	return out, nil
}

// SweepFileBlobs implements journal.FileCheckpoints: it lists the
// candidates, then deletes each in a transaction under the blob's lock,
// checking again that it is old and unreferenced. Chunks go with their
// blob (ON DELETE CASCADE); a failed upload leaves none.
func (s *Store) SweepFileBlobs(ctx context.Context, olderThan time.Time) (int, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	const unreferenced = "touched < $1 AND NOT EXISTS (SELECT 1 FROM lz_file_checkpoints c WHERE c.sha256 = b.sha256)"
	olderThan = ceilMicrosecond(olderThan)
	rows, err := s.pool.Query(ctx, "SELECT sha256 FROM lz_file_blobs b WHERE "+unreferenced, olderThan)
	if err != nil {
		return 0, s.wrap(ctx, "sweep blobs", err)
	}
	var cands [][]byte
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			rows.Close()
			return 0, s.wrap(ctx, "sweep blobs", err)
		}
		cands = append(cands, raw)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, s.wrap(ctx, "sweep blobs", err)
	}
	n := 0
	for _, raw := range cands {
		if len(raw) < 4 {
			return n, journal.Corruptf("pgjournal: blob name of %d bytes", len(raw))
		}
		removed := 0
		err := s.writeTx(ctx, "sweep blob", "", func(tx pgx.Tx) error {
			if err := lockBlob(ctx, tx, raw); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, "DELETE FROM lz_file_blobs b WHERE sha256 = $2 AND "+unreferenced, olderThan, raw)
			if err != nil {
				return err
			}
			removed = int(tag.RowsAffected())
			return nil
		})
		if err != nil {
			return n, err
		}
		n += removed
	}
	return n, nil
}

// ceilMicrosecond rounds t up to a whole microsecond. A timestamptz holds
// whole microseconds and a parameter is truncated to them, so a blob
// touched at T (whole) is before t exactly when T < ceilMicrosecond(t):
// comparing with t truncated would keep a blob touched less than a
// microsecond before t.
func ceilMicrosecond(t time.Time) time.Time {
	if c := t.Truncate(time.Microsecond); !c.Equal(t) {
		return c.Add(time.Microsecond)
	}
	return t
}
