package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// CreateSchedule is the body of POST /v1/conversations/{id}/schedules
// (lazarus Runtime.Schedule): a wake-up that appends Text as a user
// message at each occurrence, which starts a turn; the caller is recorded
// as its author. Exactly one of At,
// After and Cron, or Every alone; Every may follow At or After. Durations
// are Go durations ("90s", "1h30m"). New optional fields may be added;
// existing ones keep their meaning.
type CreateSchedule struct {
	// ID names the schedule; one with the ID of an existing schedule of the
	// conversation replaces it. Optional: a new id is chosen.
	ID string `json:"id,omitempty"`
	// At fires once at this time (RFC 3339), which must be in the future.
	At *time.Time `json:"at,omitempty"`
	// After fires once after this delay (positive) from now.
	After string `json:"after,omitempty"`
	// Every repeats at this interval (at least lazarus.MinScheduleInterval).
	Every string `json:"every,omitempty"`
	// Cron fires on a five-field cron expression or a descriptor
	// ("@daily"), read in TimeZone.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA zone Cron is read in ("Local" is refused).
	// Default "UTC".
	TimeZone string `json:"time_zone,omitempty"`
	// Text is the user message of each occurrence. Required.
	Text string `json:"text"`
}

// Schedule is a pending scheduled wake-up as the API shows it.
type Schedule struct {
	ID             string `json:"id"`
	ConversationID string `json:"conversation_id"`
	// Next is the next occurrence.
	Next *time.Time `json:"next,omitempty"`
	// Every is the repeat interval as a Go duration; absent if none.
	Every string `json:"every,omitempty"`
	// Cron and TimeZone are the cron expression and the IANA zone it is
	// read in, as given when it was scheduled; absent if none.
	Cron     string `json:"cron,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Text is the user message each occurrence appends (lazarus.ScheduleText):
	// its text parts joined by newlines.
	Text string `json:"text"`
	// Author is who scheduled it. A wake runs under the scope the runtime's
	// ScopeLoader rebuilds from it, else under the system's scope.
	Author  *Identity  `json:"author,omitempty"`
	Created *time.Time `json:"created,omitempty"`
}

// ScheduleList is a page of a conversation's pending schedules, ordered by
// id: those after the query's cursor (a schedule id; absent, from the
// first) whose JSON fits Options.MaxPageBytes, at least one.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	// NextCursor resumes the listing (as the query parameter cursor);
	// absent when there is no more, so a listing within
	// Options.MaxPageBytes is one page, as before paging.
	NextCursor string `json:"next_cursor,omitempty"`
}

func scheduleOf(sc *messages.Schedule) Schedule {
	out := Schedule{ID: sc.GetId(), ConversationID: sc.GetConversationId(), Next: timeOf(sc.GetNext()),
		Cron: sc.GetCron(), TimeZone: sc.GetTimeZone(), Author: identityOf(sc.GetAuthor()), Created: timeOf(sc.GetCreated())}
	if sc.GetEvery() != nil {
		out.Every = sc.GetEvery().AsDuration().String()
	}
	out.Text = lazarus.ScheduleText(sc)
	return out
}

// duration parses an optional duration field of a body.
func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errInvalid(fmt.Sprintf("%s: %q is not a duration (as \"90s\" or \"1h30m\")", field, s))
	}
	return d, nil
}

// listSchedules answers a page of the conversation's pending schedules
// (Runtime.Schedules): those with an id after the cursor, within
// Options.MaxPageBytes of JSON (at least one, so paging always gets on).
// The ids are the conversation's, which its caller sees: the cursor is
// the plain id of the page's last schedule, never sealed.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	cursor, _, err := queryParam(r, "cursor")
	if err == nil && cursor != "" {
		err = journal.ValidateID("cursor", cursor)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	all, err := s.rt.Schedules(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if cursor != "" {
		all = slices.DeleteFunc(all, func(sc *messages.Schedule) bool { return sc.GetId() <= cursor })
	}
	out := ScheduleList{Schedules: make([]Schedule, 0, min(len(all), 64))}
	size := 0
	for i, sc := range all {
		v := scheduleOf(sc)
		b, err := json.Marshal(v)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if len(out.Schedules) > 0 && size+len(b) > s.opts.MaxPageBytes {
			out.NextCursor = all[i-1].GetId()
			break
		}
		size += len(b)
		out.Schedules = append(out.Schedules, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// createSchedule schedules a wake-up (Runtime.Schedule), the caller as its
// author; 201 with the stored schedule.
func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	var body CreateSchedule
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	after, err := duration("after", body.After)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	every, err := duration("every", body.Every)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A zero duration given is no absent one (which ScheduleSpec reads a
	// zero as): an every below a second, an after that is no delay.
	if body.Every != "" && every == 0 {
		s.writeError(w, r, fmt.Errorf("%w: every %q is below %v: %w", lazarus.ErrBadSchedule, body.Every, lazarus.MinScheduleInterval, journal.ErrInvalid))
		return
	}
	if body.After != "" && after == 0 {
		s.writeError(w, r, fmt.Errorf("%w: after %q is no delay: %w", lazarus.ErrBadSchedule, body.After, journal.ErrInvalid))
		return
	}
	spec := lazarus.ScheduleSpec{ID: body.ID, After: after, Every: every, Cron: body.Cron, TimeZone: body.TimeZone, Text: body.Text}
	if body.At != nil {
		if body.At.IsZero() {
			// The first instant of year 1, which ScheduleSpec reads as no
			// At: a time in the past.
			s.writeError(w, r, fmt.Errorf("%w: at %s is in the past: %w", lazarus.ErrScheduleInPast, body.At.Format(time.RFC3339), journal.ErrInvalid))
			return
		}
		spec.At = *body.At
	}
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	sc, err := s.rt.Schedule(r.Context(), id, spec, c.scope())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, scheduleOf(sc))
}

// deleteSchedule cancels a schedule (Runtime.CancelSchedule): 204, or 404
// for a schedule the conversation does not have, whose message names both
// ids (not the Store's wording).
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	sched := r.PathValue("schedule")
	if err := s.rt.CancelSchedule(r.Context(), id, sched); err != nil {
		if errors.Is(err, lazarus.ErrNoSchedule) {
			err = &apiError{status: http.StatusNotFound, code: CodeNotFound,
				msg: fmt.Sprintf("no schedule %q in conversation %q", sched, id)}
		}
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
