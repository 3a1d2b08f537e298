package memjournal

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var (
	_ journal.Forks         = (*Store)(nil)
	_ journal.MetadataIndex = (*Store)(nil)
)

// setMeta sets the metadata key k of conversation id (held in c) to v, an
// empty v deleting it, and keeps the metadata index in step. The caller
// holds the lock.
func (st *state) setMeta(id string, c *conv, k, v string) {
	if old, ok := c.meta[k]; ok {
		if ids := st.found[k][old]; ids != nil {
			delete(ids, id)
			if len(ids) == 0 {
				delete(st.found[k], old)
				if len(st.found[k]) == 0 {
					delete(st.found, k)
				}
			}
		}
		delete(c.meta, k)
	}
	if v == "" {
		return
	}
	if c.meta == nil {
		c.meta = make(map[string]string)
	}
	c.meta[k] = v
	byValue := st.found[k]
	if byValue == nil {
		byValue = make(map[string]map[string]struct{})
		st.found[k] = byValue
	}
	ids := byValue[v]
	if ids == nil {
		ids = make(map[string]struct{})
		byValue[v] = ids
	}
	ids[id] = struct{}{}
}

// Fork implements journal.Forks: the whole copy is made under the lock, so
// no reader sees a part of it.
func (s *Store) Fork(ctx context.Context, req *messages.ForkRequest) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := journal.ValidateFork(req); err != nil {
		return fmt.Errorf("memjournal: %w", err)
	}
	id := req.GetConversationId()
	now := time.Now()
	st, err := s.lock()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := st.deleted[id]; ok {
		return deletedErr("fork into", id)
	}
	if c := st.convs[id]; c != nil && (c.row != nil || c.lastSeq() > 0) {
		return fmt.Errorf("memjournal: fork into %q: %w", id, journal.ErrExists)
	}
	var cur map[string]string // a conversation without a row may have metadata
	if c := st.convs[id]; c != nil {
		cur = c.meta
	}
	if err := journal.ValidateMetadata(id, journal.MergeSettings(cur, req.GetMetadata())); err != nil {
		return fmt.Errorf("memjournal: fork into %q: %w", id, err)
	}
	c := st.conv(id)
	if sum := req.GetSummary(); sum != nil {
		c.base = sum.GetToSeq()
		c.summaries = []*messages.Summary{clone(sum)}
	}
	c.events = cloneAll(req.GetEvents())
	c.row = &messages.Conversation{
		Id:         id,
		Settings:   journal.MergeSettings(nil, req.GetSettings()),
		Status:     req.GetStatus(),
		Created:    timestamppb.New(now),
		Updated:    timestamppb.New(now),
		ForkedFrom: clone(req.GetOrigin()),
	}
	if req.GetOrigin() == nil {
		c.row.ForkedFrom = nil
	}
	for k, v := range req.GetMetadata() {
		st.setMeta(id, c, k, v)
	}
	st.indexActive(id, c)
	return nil
}

// FindConversations implements journal.MetadataIndex: it sorts the ids
// holding the pair, so its cost depends on their number only.
func (s *Store) FindConversations(ctx context.Context, key, value, cursor string, limit int) ([]string, string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, "", err
	}
	after, limit, err := journal.ParseFind(key, value, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("memjournal: %w", err)
	}
	st, err := s.lock()
	if err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	var ids []string
	for id := range st.found[key][value] {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = journal.FindCursor(ids[limit-1])
	}
	return ids, next, nil
}
