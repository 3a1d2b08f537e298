package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var (
	_ journal.Forks         = (*Store)(nil)
	_ journal.MetadataIndex = (*Store)(nil)
)

// Fork implements journal.Forks: one transaction, under the new
// conversation's lock, writes its row, events, summary and metadata.
func (s *Store) Fork(ctx context.Context, req *messages.ForkRequest) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := journal.ValidateFork(req); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	id := req.GetConversationId()
	now := time.Now()
	row := &messages.Conversation{
		Id:         id,
		Settings:   journal.MergeSettings(nil, req.GetSettings()),
		Status:     req.GetStatus(),
		Created:    timestamppb.New(now),
		Updated:    timestamppb.New(now),
		ForkedFrom: req.GetOrigin(),
	}
	rowData, err := proto.Marshal(row)
	if err != nil {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("conversation %q cannot be encoded (%v)", id, err))
	}
	if len(rowData) > journal.MaxRecordBytes {
		return fmt.Errorf("pgjournal: %w", journal.Invalidf("conversation %q of %d bytes exceeds %d", id, len(rowData), journal.MaxRecordBytes))
	}
	seqs := make([]int64, 0, len(req.GetEvents()))
	datas := make([][]byte, 0, len(req.GetEvents()))
	last := req.GetSummary().GetToSeq()
	for _, ev := range req.GetEvents() {
		b, err := proto.Marshal(ev)
		if err != nil {
			return fmt.Errorf("pgjournal: %w", journal.Invalidf("event %d of fork %q cannot be encoded (%v)", ev.GetSeq(), id, err))
		}
		seqs, datas = append(seqs, toInt64(ev.GetSeq())), append(datas, b)
		last = ev.GetSeq()
	}
	var sumData []byte
	if sum := req.GetSummary(); sum != nil {
		if sumData, err = proto.Marshal(sum); err != nil {
			return fmt.Errorf("pgjournal: %w", journal.Invalidf("summary of fork %q cannot be encoded (%v)", id, err))
		}
	}
	var keys, vals, dels [][]byte
	for k, v := range req.GetMetadata() {
		if v == "" {
			dels = append(dels, []byte(k))
			continue
		}
		keys, vals = append(keys, []byte(k)), append(vals, []byte(v))
	}
	write := func(tx pgx.Tx) error {
		var deleted, hasRow bool
		var lastSeq int64
		err := tx.QueryRow(ctx, "SELECT deleted, row IS NOT NULL, last_seq FROM lz_conversations WHERE id = $1", []byte(id)).Scan(&deleted, &hasRow, &lastSeq)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if _, err := decodeLastSeq(id, lastSeq); err != nil {
			return err
		}
		switch {
		case deleted:
			return fmt.Errorf("fork into %q: %w", id, journal.ErrDeleted)
		case hasRow || lastSeq > 0:
			return fmt.Errorf("fork into %q: %w", id, journal.ErrExists)
		}
		// A conversation without a row may have metadata: the merge is
		// bounded as PutMetadata's.
		if err := checkMergedMetadata(ctx, tx, id, req.GetMetadata()); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO lz_conversations (id, last_seq, row, status) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET last_seq = excluded.last_seq, row = excluded.row, status = excluded.status`,
			[]byte(id), toInt64(last), rowData, int32(row.GetStatus()))
		if len(seqs) > 0 {
			b.Queue("INSERT INTO lz_events (conv, seq, data) SELECT $1, s, d FROM unnest($2::bigint[], $3::bytea[]) AS u(s, d)",
				[]byte(id), seqs, datas)
		}
		if sumData != nil {
			b.Queue("INSERT INTO lz_summaries (conv, to_seq, data) VALUES ($1, $2, $3)",
				[]byte(id), toInt64(req.GetSummary().GetToSeq()), sumData)
		}
		if len(dels) > 0 {
			b.Queue("DELETE FROM lz_metadata WHERE conv = $1 AND key = ANY($2::bytea[])", []byte(id), dels)
		}
		if len(keys) > 0 {
			b.Queue(`INSERT INTO lz_metadata (conv, key, value) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v)
				ON CONFLICT (conv, key) DO UPDATE SET value = excluded.value`, []byte(id), keys, vals)
		}
		return tx.SendBatch(ctx, b).Close()
	}
	// An event row already at a seq the fork writes (the conversation had
	// no events: its last_seq is 0) breaks the key of lz_events; writeTx
	// would take it for a row a concurrent writer inserted and run the
	// fork again, meeting the row each time, to end in ErrConflict. It is
	// ErrCorrupt, as in AppendBatch (findStrayEvents). So is a summary
	// row already at the fork's summary's to_seq: no writer puts a summary
	// past a conversation's last_seq, and the fork holds the lock.
	return s.rerun(ctx, "fork", func() error {
		err := s.writeTxOnce(ctx, "fork", id, write)
		if summariesKey(err) {
			return s.wrap(ctx, "fork", journal.Corruptf("pgjournal: conversation %q: lz_summaries holds a summary to seq %d, past its last_seq",
				id, req.GetSummary().GetToSeq()))
		}
		if !eventsKey(err) {
			return err
		}
		convs := make([][]byte, len(seqs))
		for i := range convs {
			convs[i] = []byte(id)
		}
		stray, serr := findStrayEvents(ctx, s.pool, false, convs, seqs)
		if serr != nil {
			return s.wrap(ctx, "fork", serr)
		}
		if serr := stray[id]; serr != nil {
			return s.wrap(ctx, "fork", serr)
		}
		return err
	})
}

// FindConversations implements journal.MetadataIndex: a walk of the index
// lz_metadata_find (key, hash of the value, conversation) from the cursor
// on.
func (s *Store) FindConversations(ctx context.Context, key, value, cursor string, limit int) ([]string, string, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, "", err
	}
	defer cancel()
	after, limit, err := journal.ParseFind(key, value, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("pgjournal: %w", err)
	}
	if value == "" {
		return nil, "", nil
	}
	rows, err := s.pool.Query(ctx, `SELECT conv FROM lz_metadata
		WHERE key = $1 AND sha256(value) = sha256($2::bytea) AND value = $2::bytea AND conv > $3
		ORDER BY conv LIMIT $4`, []byte(key), []byte(value), []byte(after), onePast(limit))
	if err != nil {
		return nil, "", s.wrap(ctx, "find conversations", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, "", s.wrap(ctx, "find conversations", err)
		}
		ids = append(ids, string(id))
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrap(ctx, "find conversations", err)
	}
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = journal.FindCursor(ids[limit-1])
	}
	return ids, next, nil
}
