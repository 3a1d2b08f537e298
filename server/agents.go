package server

import (
	"fmt"
	"math"
	"net/http"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// defaultAgentParam is how the agent query parameter and a send's agent
// name the default agent (as the handoff tool does).
const defaultAgentParam = "default"

// agentParam reads the agent query parameter of a history or stream
// request: nil without it (every agent's events), else the view of that
// agent ("default" is the default agent). A name the Runtime does not know
// (Runtime.HasAgent, the rule lazarus.HistoryView and SubscribeWith apply)
// is a bad request.
func (s *Server) agentParam(r *http.Request) (*lazarus.AgentView, error) {
	name, given, err := queryParam(r, "agent")
	if err != nil || !given {
		return nil, err
	}
	switch {
	case name == defaultAgentParam:
		return lazarus.ViewOf(""), nil
	case s.rt.HasAgent(name):
		return lazarus.ViewOf(name), nil
	}
	return nil, errInvalid(fmt.Sprintf("agent %q is not an agent of this server (%q is the default agent)", name, defaultAgentParam))
}

// historyOf is the history page of a conversation: the full log's, or with
// a view only the events that agent sees (its own and those shared with
// it), and with effective only what the model's context is built from
// (lazarus.HistoryOptions.Effective), paged the same way.
func (s *Server) historyOf(r *http.Request, id string, before uint64, limit int, view *lazarus.AgentView, effective bool) ([]*messages.Event, error) {
	if view == nil && !effective {
		// The Store stops at the page's bytes: an event's proto encoding
		// is no larger than its JSON, so what it keeps holds every event
		// the page's JSON cut keeps.
		return s.rt.HistoryWithin(r.Context(), id, before, limit, s.opts.MaxPageBytes)
	}
	// The view's read stops one event (viewSlack) past the page's bytes,
	// or past one event if the page's bytes are fewer: had it been cut by
	// its bytes, its entries' proto encodings would sum to more than
	// both, so there would be two at least and the page's JSON cut
	// (proto encodings are no larger than JSON) would keep fewer than
	// all of them. So when the page keeps every entry returned, the view
	// holds nothing before them that the limit let in, and the page
	// needs no further read to say so (as the full log's does).
	maxBytes := math.MaxInt
	if s.opts.MaxPageBytes <= math.MaxInt-2*viewSlack {
		maxBytes = max(s.opts.MaxPageBytes, viewSlack) + viewSlack
	}
	entries, err := s.rt.HistoryView(r.Context(), id, lazarus.HistoryOptions{Before: before, Limit: limit, MaxBytes: maxBytes, Agent: view, Effective: effective})
	if err != nil {
		return nil, err
	}
	evs := make([]*messages.Event, len(entries))
	for i, e := range entries {
		evs[i] = e.Event
	}
	return evs, nil
}

// viewSlack bounds a stored event's encoding: journal.MaxEventBytes, and
// its seq.
const viewSlack = journal.MaxEventBytes + 16

// viewParam reads the view query parameter of a history request: "full"
// (the default: the whole log, rewound spans and rewind events included) or
// "effective" (what the model's context is built from); an empty value
// is neither.
func viewParam(r *http.Request) (effective bool, err error) {
	v, given, err := queryParam(r, "view")
	if err != nil {
		return false, err
	}
	switch {
	case !given, v == "full":
		return false, nil
	case v == "effective":
		return true, nil
	default:
		return false, errInvalid(fmt.Sprintf("view %q: want \"full\" or \"effective\"", v))
	}
}
