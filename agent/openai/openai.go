// Package openai is an agent.Model on the OpenAI Chat Completions API,
// streaming, built on the official SDK (github.com/openai/openai-go/v3). It
// works with any server that speaks that API by base URL: OpenAI, vLLM,
// Ollama, llama.cpp's server, OpenRouter.
//
// # Streaming and tool calls
//
// Text deltas reach onDelta as the chunks arrive. Tool calls are assembled
// from their fragments (a call's arguments split across many chunks, several
// calls in one answer, told apart by their index; a name or id a server
// repeats in each fragment is kept once), and returned in index
// order with an empty Id (the runtime mints one) and the provider's own id
// in ProviderId. In the history sent back to the provider, a call and its
// result carry the runtime's id, which is unique and stable across kills,
// and an answer's results follow it (ResultsAfterCalls: a message sent
// while its calls were open, which the log holds first, comes after them).
// Usage is requested with stream_options include_usage and recorded on
// the assistant message, with the model's name: prompt_tokens as
// input_tokens (cached tokens included), completion_tokens as
// output_tokens, prompt_tokens_details.cached_tokens as
// cache_read_input_tokens and prompt_tokens_details.cache_write_tokens
// (sent by some servers, OpenRouter among them) as
// cache_creation_input_tokens (both a part of input_tokens; 0 if not
// reported). total_tokens is not read: the total is input_tokens plus
// output_tokens, as they came, whatever total the server sent. The usage
// recorded is the last the stream reported (a server may send it on every
// chunk, as vLLM's continuous_usage_stats does), a negative count as 0
// (no server means one). The answer ends once the stream has given its
// finish reason and the usage chunk (the one without choices, which
// include_usage sends last), whether or not [DONE] follows or the
// connection closes; from a server that sends no such chunk it ends with
// the stream.
//
// # The messages sent
//
// The system prompt and the turn's summary (after SummaryPrefix) go in
// one system message, first; either one that is empty or only whitespace
// is left out, and so is the system message when both are. The first
// message after it is the user's: when the context starts with the
// assistant's (after a summary that ended at a user message or a tool
// result), a short user message goes before it, LeadAfterSummary or
// LeadWithoutSummary, since the chat templates of many models that
// compatible servers run (Mistral's, Gemma's, Llama 2's) refuse a
// conversation that does not alternate from the user's. A context that
// starts with the user's is sent as it is.
//
// A tool's Parameters that are an object schema without properties
// ({"type":"object"}, what MCP servers list for a tool without arguments)
// are sent with an empty "properties": OpenAI refuses the request
// otherwise. Parameters that are empty ("") or the empty schema ({}) are
// sent as {"type":"object","properties":{}}: OpenAI refuses a function
// schema whose type is not "object", and some compatible servers
// (llama.cpp's) a function without parameters.
//
// # Failures
//
// Errors wrap the provider-neutral sentinels of package agent (errors.Is),
// and the SDK's *openai.Error when the server answered with an error status
// (errors.As). A 429 (after its retry-after-ms, else its Retry-After), a
// 408, a 409, a 5xx and a connection that failed before any text was
// streamed are retried under Options.Retry (any other 4xx fails with
// agent.ErrRequest), except an error status whose error's type or code is
// insufficient_quota (the account is out of credit: waiting does not
// help), a 429 or any other (a 403, a 400 or a 5xx from compatible
// servers and proxies), which fails at once with agent.ErrRateLimited; the
// SDK's own retries are off. An error event in the stream (a 200 that
// failed after its headers; a chunk whose "error" is null, which some
// compatible servers send in every chunk, is not one) is read like a
// status: one whose error's code
// is a 4xx status (vLLM, llama.cpp, OpenRouter) or whose type or code says
// the request is at fault (invalid_request_error, invalid_api_key,
// authentication_error, NotFoundError, ...) fails with agent.ErrRequest,
// before text or after it, and insufficient_quota with
// agent.ErrRateLimited, neither retried; any other error event is retried
// while no text was streamed. An error status whose body is not an error
// object (HTML from a proxy, {"error":"text"}, nothing) is classified by
// its status alike, with an *openai.Error that carries it; one whose body
// is the error object itself, not under "error" (vLLM's before it wrapped
// them), is read as that object. Once text was streamed, a failure is never
// retried here (the text would stream twice within one call): the call
// fails with agent.ErrInterrupted, and nothing of it is written; the
// runtime's own policy (lazarus.Options.ModelRetry) may then call Generate
// again, after announcing the retry to subscribers. See agent.ErrRateLimited
// for the outcome of each failure. A request over the model's window is
// agent.ErrContextLength, never retried: OpenAI's code
// context_length_exceeded, and the wordings of the compatible servers
// (vLLM's "maximum context length", llama.cpp's exceed_context_size_error),
// as an error status of any kind (a 5xx included: some servers send a 500)
// or an error event.
//
// The token bound of an answer (Options.MaxTokens, or the conversation's
// max tokens) is sent as max_completion_tokens, or as max_tokens alone
// with Options.LegacyMaxTokens, for servers that read only that.
//
// A stop at the token bound (finish_reason "length", at Options.MaxTokens
// or the conversation's max tokens) is not a failure: the answer is what
// the model wrote up to the bound, and a tool call cut there keeps its
// arguments as far as they came (not JSON: the runtime records the call
// with an invalid error result the model reads next). In the history sent
// back, a call whose arguments are not a JSON object carries {} instead. A stream that ends
// with no finish reason at all is agent.ErrIncomplete, and one whose text,
// model name or a call's id is not valid UTF-8 is agent.ErrMalformed (see
// NotUTF8).
//
// # Environment
//
// New reads nothing from the environment; OptionsFromEnv does:
// OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL.
package openai

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Environment variables read by OptionsFromEnv.
const (
	EnvBaseURL = "OPENAI_BASE_URL"
	EnvAPIKey  = "OPENAI_API_KEY"
	EnvModel   = "OPENAI_MODEL"
)

// SummaryPrefix starts a turn's summary in the system message, after the
// system prompt and a blank line (the anthropic provider sends it as a
// system block of its own).
const SummaryPrefix = "Summary of the earlier conversation:\n"

// The user message sent before a context whose first message is the
// assistant's (the first event after a summary may be the assistant's
// reply), by this provider and the anthropic one: LeadAfterSummary when
// the turn has a summary (not empty or only whitespace), else
// LeadWithoutSummary. It is sent only, never recorded.
const (
	LeadAfterSummary   = "(The conversation so far is summarized in the system prompt.)"
	LeadWithoutSummary = "(continued)"
)

// Options configure a Model.
type Options struct {
	// Model names the model, as the server knows it ("gpt-4o-mini",
	// "llama3.1:8b"). Required.
	Model string
	// BaseURL is the API's base URL, up to and including the version
	// ("http://localhost:11434/v1"). Empty means the SDK's default
	// (OpenAI's public API).
	BaseURL string
	// APIKey is sent as a bearer token. Empty sends none that the local
	// servers check.
	APIKey string
	// System is the system prompt sent first on every call. Empty (or
	// only whitespace) means none.
	System string
	// Temperature, if set, is sent as the sampling temperature. Nil means
	// the server's default.
	Temperature *float64
	// MaxTokens bounds the tokens of an answer (max_completion_tokens). 0
	// means the server's default.
	MaxTokens int64
	// LegacyMaxTokens sends the bound of an answer (MaxTokens, or the
	// conversation's max tokens) as max_tokens instead of
	// max_completion_tokens, for compatible servers that read only
	// max_tokens (older ones, some proxies). Leave it false for OpenAI:
	// max_tokens is deprecated there, and its reasoning models refuse it.
	LegacyMaxTokens bool
	// Retry bounds the retries of a call (429, 408, 409, 5xx, a failure
	// before any text). The zero value is retry's defaults.
	Retry retry.Policy
	// HTTPClient sends the requests. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// RequestOptions are passed to the SDK after the ones above, to set what
	// Options does not (headers, an organization).
	RequestOptions []option.RequestOption
}

// OptionsFromEnv returns Options with BaseURL, APIKey and Model read from
// OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL (unset variables leave
// their fields empty).
func OptionsFromEnv() Options {
	return Options{BaseURL: os.Getenv(EnvBaseURL), APIKey: os.Getenv(EnvAPIKey), Model: os.Getenv(EnvModel)}
}

// Model is an agent.Model on the Chat Completions API. Safe for concurrent
// use.
type Model struct {
	opts   Options
	client oai.ChatCompletionService
	params sync.Map // Parameters text -> shared.FunctionParameters
}

var _ agent.Model = (*Model)(nil)

// New returns a Model. It fails with an error wrapping journal.ErrInvalid
// when Options.Model is empty. It makes no request, and reads nothing from
// the environment: the SDK's client would take OPENAI_BASE_URL (where the
// key would go), OPENAI_ORG_ID, OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS
// from it, so the Model builds its service without the SDK's defaults.
func New(opts Options) (*Model, error) {
	if opts.Model == "" {
		return nil, journal.Invalidf("openai: no model name (Options.Model, or %s)", EnvModel)
	}
	ro := []option.RequestOption{option.WithEnvironmentProduction(), option.WithMaxRetries(0), option.WithAPIKey(opts.APIKey)}
	if opts.BaseURL != "" {
		ro = append(ro, option.WithBaseURL(opts.BaseURL))
	}
	if opts.HTTPClient != nil {
		ro = append(ro, option.WithHTTPClient(opts.HTTPClient))
	}
	ro = append(ro, opts.RequestOptions...)
	return &Model{opts: opts, client: oai.NewChatCompletionService(ro...)}, nil
}

// Generate implements agent.Model: one streamed Chat Completions call,
// retried under Options.Retry while nothing has been streamed.
func (m *Model) Generate(ctx context.Context, turn agent.Turn, onDelta func(text string)) (*messages.AssistantMessage, error) {
	params, err := m.request(turn)
	if err != nil {
		return nil, err
	}
	var out *messages.AssistantMessage
	err = m.opts.Retry.Do(ctx, func(ctx context.Context) error {
		msg, err := m.attempt(ctx, params, onDelta)
		out = msg
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// request renders a turn as the call's parameters.
func (m *Model) request(turn agent.Turn) (oai.ChatCompletionNewParams, error) {
	// The conversation's settings, over the Model's own.
	set := turn.Settings.Over(agent.Settings{SystemPrompt: m.opts.System, Model: m.opts.Model, Temperature: m.opts.Temperature, MaxTokens: m.opts.MaxTokens})
	p := oai.ChatCompletionNewParams{
		Model:         shared.ChatModel(set.Model),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}
	if set.Temperature != nil {
		p.Temperature = oai.Float(*set.Temperature)
	}
	switch {
	case set.MaxTokens <= 0:
	case m.opts.LegacyMaxTokens:
		p.MaxTokens = oai.Int(set.MaxTokens)
	default:
		p.MaxCompletionTokens = oai.Int(set.MaxTokens)
	}
	switch {
	case set.ToolChoice == "" || len(turn.Tools) == 0:
		// No tools: the API refuses a tool_choice without them (400).
	case set.ToolChoice == agent.ToolChoiceAuto, set.ToolChoice == agent.ToolChoiceNone, set.ToolChoice == agent.ToolChoiceRequired:
		p.ToolChoice.OfAuto = oai.String(set.ToolChoice)
	default:
		p.ToolChoice = oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: set.ToolChoice})
	}
	msgs := make([]oai.ChatCompletionMessageParamUnion, 0, len(turn.Context)+2)
	// One system message, first: the chat templates of many models that
	// compatible servers run (Mistral's, Gemma's) refuse a second one.
	// A prompt or a summary that is only whitespace is left out, as the
	// anthropic provider does.
	system := set.SystemPrompt
	if strings.TrimSpace(system) == "" {
		system = ""
	}
	if s := turn.Summary.GetContent(); strings.TrimSpace(s) != "" {
		if system != "" {
			system += "\n\n"
		}
		system += SummaryPrefix + s
	}
	if system != "" {
		msgs = append(msgs, oai.SystemMessage(system))
	}
	// The chat templates of many models that compatible servers run
	// (Mistral's, Gemma's, Llama 2's) refuse a conversation whose first
	// message after the system's is not the user's, which a context
	// starting after a summary with the assistant's reply would send on
	// every turn: a short user message goes first.
	evs := ResultsAfterCalls(turn.Context)
	if len(evs) > 0 && evs[0].GetAssistantMsg() != nil {
		lead := LeadWithoutSummary
		if strings.TrimSpace(turn.Summary.GetContent()) != "" {
			lead = LeadAfterSummary
		}
		msgs = append(msgs, oai.UserMessage(lead))
	}
	for _, ev := range evs {
		switch {
		case ev.GetUserMsg() != nil:
			msgs = append(msgs, oai.UserMessage(Text(ev.GetUserMsg().GetContent())))
		case ev.GetAssistantMsg() != nil:
			a := ev.GetAssistantMsg()
			am := &oai.ChatCompletionAssistantMessageParam{}
			if t := Text(a.GetContent()); t != "" || len(a.GetToolCalls()) == 0 {
				am.Content.OfString = oai.String(t)
			}
			for _, tc := range a.GetToolCalls() {
				args := tc.GetArguments()
				if !agent.ValidJSON(args) || !strings.HasPrefix(strings.TrimLeft(args, " \t\r\n"), "{") {
					// Arguments that were not a JSON object (cut at
					// the token bound; recorded with an error result
					// the model reads next) are sent as an empty
					// object: servers that decode them for the chat
					// template (vLLM) refuse the whole history
					// otherwise, on every later call.
					args = "{}"
				}
				am.ToolCalls = append(am.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
						ID:       CallID(tc),
						Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.GetName(), Arguments: args},
					},
				})
			}
			msgs = append(msgs, oai.ChatCompletionMessageParamUnion{OfAssistant: am})
		case ev.GetToolResult() != nil:
			tr := ev.GetToolResult()
			msgs = append(msgs, oai.ToolMessage(ResultText(tr.GetOutcome()), tr.GetToolCallId()))
		}
	}
	p.Messages = msgs
	for _, spec := range turn.Tools {
		fd := shared.FunctionDefinitionParam{Name: spec.Name}
		if spec.Description != "" {
			fd.Description = oai.String(spec.Description)
		}
		params, err := m.parameters(spec)
		if err != nil {
			return p, err
		}
		fd.Parameters = params
		p.Tools = append(p.Tools, oai.ChatCompletionFunctionTool(fd))
	}
	return p, nil
}

// parameters decodes a tool's JSON schema once per distinct text. An
// object schema without properties gets an empty one; no schema, or an
// empty one ({}), is an object schema with no properties.
func (m *Model) parameters(spec agent.ToolSpec) (shared.FunctionParameters, error) {
	if spec.Parameters == "" {
		// OpenAI takes a function without parameters, but some
		// compatible servers (llama.cpp's) refuse one: it gets the
		// schema of no arguments, which both take.
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	if v, ok := m.params.Load(spec.Parameters); ok {
		return v.(shared.FunctionParameters), nil
	}
	var fp shared.FunctionParameters
	err := json.Unmarshal([]byte(spec.Parameters), &fp)
	if err == nil && fp == nil {
		err = errors.New("null is not a JSON object") // it decodes as a nil map
	}
	if err != nil {
		// The request cannot be made: agent.ErrRequest, the one sentinel
		// a provider's error wraps, beside journal.ErrInvalid.
		return nil, fmt.Errorf("%w: %w", agent.ErrRequest, journal.Invalidf("openai: parameters of tool %s: %v", spec.Name, err))
	}
	if len(fp) == 0 {
		// {} is valid JSON schema (anything goes), but OpenAI refuses a
		// function schema whose type is not "object" (400).
		fp["type"] = "object"
	}
	if fp["type"] == "object" && fp["properties"] == nil {
		// An object without properties ({"type":"object"}, what MCP
		// servers list for a tool without arguments) is valid JSON
		// schema, but OpenAI refuses the whole request (400: "object
		// schema missing properties"): it gets an empty one.
		fp["properties"] = map[string]any{}
	}
	m.params.Store(spec.Parameters, fp)
	return fp, nil
}

// Text joins the text parts of content; an image or a file part becomes
// "[image]" or "[file]".
func Text(content []*messages.ContentPart) string {
	if len(content) == 1 && content[0].GetImage() == nil && content[0].GetFile() == nil {
		return content[0].GetText()
	}
	var b strings.Builder
	for _, p := range content {
		switch {
		case p.GetImage() != nil:
			b.WriteString("[image]")
		case p.GetFile() != nil:
			b.WriteString("[file]")
		default:
			b.WriteString(p.GetText())
		}
	}
	return b.String()
}

// CallID is agent.CallID: the id a call carries in the history sent to a
// provider, the runtime's id, or the provider's when the runtime minted
// none.
func CallID(tc *messages.ToolCall) string { return agent.CallID(tc) }

// ResultsAfterCalls returns the events of a turn's context with the tool
// results of each assistant message's calls moved right after it, in their
// order, and the other events after them in theirs. The log holds a user
// message sent while a call was open (a human's, a slow tool's) before the
// call's result; both APIs refuse a history where anything but the results
// follows the calls (400). It pairs the calls and results first
// (agent.PairResults: an orphan or second result is left out, a call
// without one gets an error result of code agent.CodeMissing), so what
// it returns is a history both APIs accept whatever the log holds. It
// returns evs itself when nothing moves or changes.
func ResultsAfterCalls(evs []*messages.Event) []*messages.Event {
	evs = agent.PairResults(evs)
	at := map[string]int{} // a call's id -> the index of its first result
	for i, ev := range evs {
		if tr := ev.GetToolResult(); tr != nil {
			if _, ok := at[tr.GetToolCallId()]; !ok {
				at[tr.GetToolCallId()] = i
			}
		}
	}
	var out []*messages.Event // nil until an event moves
	moved := map[int]bool{}
	var results []int
	for i, ev := range evs {
		if moved[i] {
			continue
		}
		if out != nil {
			out = append(out, ev)
		}
		results = results[:0]
		for _, tc := range ev.GetAssistantMsg().GetToolCalls() {
			if j, ok := at[CallID(tc)]; ok && j > i && !moved[j] {
				moved[j] = true
				results = append(results, j)
			}
		}
		slices.Sort(results)
		for k, j := range results {
			if out == nil && j != i+1+k {
				out = append(make([]*messages.Event, 0, len(evs)), evs[:i+1]...)
				for _, r := range results[:k] {
					out = append(out, evs[r])
				}
			}
			if out != nil {
				out = append(out, evs[j])
			}
		}
	}
	if out == nil {
		return evs
	}
	return out
}

// ResultText is a tool outcome as the model reads it: the JSON content, or
// "error (<code>): <message>".
func ResultText(o *messages.ToolOutcome) string {
	if e := o.GetError(); e != nil {
		return "error (" + e.GetCode() + "): " + e.GetMessage()
	}
	return o.GetContent()
}

// call is a tool call being assembled from its fragments.
type call struct {
	index int64 // the call's place in the answer
	wire  int64 // the index its fragments carry
	id    string
	name  string
	args  strings.Builder
}

// attempt makes one streamed call.
func (m *Model) attempt(ctx context.Context, params oai.ChatCompletionNewParams, onDelta func(string)) (*messages.AssistantMessage, error) {
	var resp *http.Response // the response, for its status when the SDK's error has none
	stream := m.client.NewStreaming(ctx, params, option.WithResponseInto(&resp))
	defer stream.Close()
	if stream.Err() == nil && resp != nil {
		// The SDK's stream reads a chunk with an "error" field as an
		// error event, a null one too, which some compatible servers send
		// in every chunk. Nothing of the body is read yet: it is read
		// through a decoder that drops a null error instead.
		if d := ssestream.NewDecoder(resp); d != nil {
			stream = ssestream.NewStream[oai.ChatCompletionChunk](nullError{d}, nil)
			defer stream.Close()
		}
	}
	var (
		text, refusal strings.Builder
		calls         []*call
		finish        string
		model         string
		usage         *messages.Usage
		usageLast     bool // the last usage came on a chunk without choices
		streamed      bool
	)
	// The answer is whole once it has its finish reason and the usage
	// chunk (asked for with include_usage: the last chunk, without
	// choices). A server or proxy that sends them and then keeps the
	// connection open without [DONE] must not hold the call. Usage on a
	// chunk with choices (a server that sends it on every chunk, vLLM's
	// continuous_usage_stats, or with the finish reason) may still be
	// followed by the usage chunk: such a stream, like one that sends no
	// usage, is read to its end, and the last usage it reported is kept.
	for !(finish != "" && usageLast) && stream.Next() {
		chunk := stream.Current()
		if chunk.Model != "" {
			model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			// A negative count, which no server means, is recorded as 0.
			usage = &messages.Usage{InputTokens: max(chunk.Usage.PromptTokens, 0), OutputTokens: max(chunk.Usage.CompletionTokens, 0),
				CacheReadInputTokens:     max(chunk.Usage.PromptTokensDetails.CachedTokens, 0),
				CacheCreationInputTokens: max(chunk.Usage.PromptTokensDetails.CacheWriteTokens, 0)}
			usageLast = len(chunk.Choices) == 0
		}
		for i := range chunk.Choices {
			ch := &chunk.Choices[i]
			if ch.Index != 0 {
				continue // only the first choice is asked for
			}
			if d := ch.Delta.Content; d != "" {
				text.WriteString(d)
				if onDelta != nil {
					onDelta(d)
				}
				streamed = true
			}
			refusal.WriteString(ch.Delta.Refusal)
			for j := range ch.Delta.ToolCalls {
				calls = addFragment(calls, &ch.Delta.ToolCalls[j])
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, classify(ctx, err, streamed, resp)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	switch {
	case refusal.Len() > 0:
		return nil, fmt.Errorf("openai: %w: %s", agent.ErrRefused, refusal.String())
	case finish == "content_filter":
		return nil, fmt.Errorf("openai: %w: content filter", agent.ErrRefused)
	case finish == "":
		return nil, fmt.Errorf("openai: %w", agent.ErrIncomplete)
	}
	msg := &messages.AssistantMessage{Model: model, Usage: usage}
	if model == "" {
		msg.Model = string(params.Model) // the model asked for: the conversation's, else the options'
	}
	if text.Len() > 0 {
		msg.Content = []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text.String()}}}
	}
	slices.SortStableFunc(calls, func(a, b *call) int { return cmp.Compare(a.index, b.index) })
	for _, c := range calls {
		args := c.args.String()
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		msg.ToolCalls = append(msg.ToolCalls, &messages.ToolCall{Name: c.name, Arguments: args, ProviderId: c.id})
	}
	if what := NotUTF8(msg); what != "" {
		return nil, fmt.Errorf("openai: %w: %s is not valid UTF-8", agent.ErrMalformed, what)
	}
	return msg, nil
}

// nullError is a stream decoder that drops an event's "error" field when
// it is null, so that the SDK's stream does not read the event as an error.
type nullError struct{ ssestream.Decoder }

func (d nullError) Event() ssestream.Event {
	ev := d.Decoder.Event()
	// The SDK's own test (gjson, the top-level field), on the same data.
	if e := gjson.GetBytes(ev.Data, "error"); e.Exists() && e.Type == gjson.Null {
		if data, err := sjson.DeleteBytes(ev.Data, "error"); err == nil {
			ev.Data = data
		}
	}
	return ev
}

// NotUTF8 names the first of an answer's text, model name and calls'
// provider ids that is not valid UTF-8, or returns "" when they all are.
// The providers' SDKs pass the bytes of a JSON string through as they came,
// and the Store takes only UTF-8, so such an answer could not be recorded;
// the providers fail it with agent.ErrMalformed instead (checked on the
// whole text: a server may split a character across chunks). A call's name
// and arguments are left to the runtime, which records and checks them with
// the bad bytes replaced by U+FFFD (see agent.Model).
func NotUTF8(msg *messages.AssistantMessage) string {
	for _, p := range msg.GetContent() {
		if !utf8.ValidString(p.GetText()) {
			return "the text"
		}
	}
	if !utf8.ValidString(msg.GetModel()) {
		return "the model name"
	}
	for i, tc := range msg.GetToolCalls() {
		if !utf8.ValidString(tc.GetProviderId()) {
			return fmt.Sprintf("the id of call %d", i)
		}
	}
	return ""
}

// addFragment adds one streamed fragment of a tool call. Fragments of one
// call share its index; its first fragment carries the id and name (a
// later one may repeat them). A
// fragment with a new id at an index already used starts another call
// (servers that number every call 0); the fragments after it at that index
// are its own.
func addFragment(calls []*call, f *oai.ChatCompletionChunkChoiceDeltaToolCall) []*call {
	var c *call
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].wire == f.Index {
			c = calls[i]
			break
		}
	}
	switch {
	case c == nil:
		// A new index: the call's place, whatever the order in which the
		// calls' first fragments came.
		c = &call{index: f.Index, wire: f.Index}
		calls = append(calls, c)
	case f.ID != "" && c.id != "" && f.ID != c.id:
		// A new call at an index already used: after the calls so far.
		c = &call{index: calls[len(calls)-1].index + 1, wire: f.Index}
		calls = append(calls, c)
	}
	if f.ID != "" {
		c.id = f.ID
	}
	if f.Function.Name != c.name {
		// A name equal to the name so far repeats it (servers that send
		// the whole name with every fragment: MiniMax on NVIDIA NIM,
		// Fireworks); any other is the rest of a name split across
		// fragments.
		c.name += f.Function.Name
	}
	c.args.WriteString(f.Function.Arguments)
	return calls
}

// classify maps a failed call onto the sentinels of package agent, marking
// what may be retried. resp is the call's response, nil if none came.
func classify(ctx context.Context, err error, streamed bool, resp *http.Response) error {
	if ctx.Err() != nil {
		return fmt.Errorf("openai: %w", ctx.Err())
	}
	var apiErr *oai.Error
	if errors.As(err, &apiErr) {
		if apiErr.RawJSON() == "" {
			topLevel(apiErr) // a body without "error"
		}
		return classifyStatus(apiErr)
	}
	if resp != nil && resp.StatusCode >= 400 {
		// An error status whose body's "error" the SDK could not decode
		// (a string: {"error":"model not found"}, from a proxy or a
		// gateway) fails with its own error instead: the status decides.
		return classifyStatus(&oai.Error{StatusCode: resp.StatusCode, Request: resp.Request, Response: resp})
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, bufio.ErrTooLong) {
		// A line longer than the SDK's decoder reads (32 MiB) is a chunk
		// that cannot be decoded, not a rejected request.
		return fmt.Errorf("openai: %w: %w", agent.ErrMalformed, err)
	}
	var se *ssestream.StreamError
	isEvent := errors.As(err, &se)
	if isEvent && contextLength(string(se.Event.Data)) {
		return fmt.Errorf("openai: %w: %w", agent.ErrContextLength, err)
	}
	if isEvent {
		switch eventFault(se.Event.Data) {
		case faultRequest:
			// Before text or after it: another attempt would fail alike.
			return fmt.Errorf("openai: %w: %w", agent.ErrRequest, err)
		case faultQuota:
			return fmt.Errorf("openai: %w: %w", agent.ErrRateLimited, err)
		case faultRate:
			if !streamed {
				return retry.Retryable(fmt.Errorf("openai: %w: %w", agent.ErrRateLimited, err), 0)
			}
		}
	}
	switch {
	case streamed:
		return fmt.Errorf("openai: %w: %w", agent.ErrInterrupted, err)
	case isEvent || retry.Transient(err):
		// An error event before any text is the server's failure (vLLM
		// and OpenRouter report overload so), like a lost connection.
		return retry.Retryable(fmt.Errorf("openai: %w: %w", agent.ErrUnavailable, err), 0)
	default:
		return fmt.Errorf("openai: %w: %w", agent.ErrRequest, err)
	}
}

// topLevel fills e's message, type and code from its response's body when
// the body is the error object itself, not under "error" (vLLM before it
// wrapped its errors: {"object":"error","message":...,"code":400}), which
// the SDK does not decode. The body, which the SDK read and left as a
// copy, is left readable.
func topLevel(e *oai.Error) {
	if e.Response == nil || e.Response.Body == nil {
		return
	}
	b, err := io.ReadAll(io.LimitReader(e.Response.Body, 1<<20))
	e.Response.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil || !gjson.ValidBytes(b) {
		return
	}
	r := gjson.ParseBytes(b)
	if !r.IsObject() || r.Get("error").Exists() {
		return
	}
	e.Message, e.Type, e.Code = r.Get("message").String(), r.Get("type").String(), r.Get("code").String()
}

func classifyStatus(e *oai.Error) error {
	var after time.Duration
	if e.Response != nil {
		after = retry.After(e.Response.Header, time.Now())
	}
	switch {
	case outOfCredit(e.Type, e.Code):
		// Whatever the status: OpenAI sends a 429, compatible servers and
		// proxies a 403, a 400 or a 5xx. Waiting does not help.
		return fmt.Errorf("openai: %w: %w", agent.ErrRateLimited, e)
	case e.StatusCode == http.StatusTooManyRequests:
		return retry.Retryable(fmt.Errorf("openai: %w: %w", agent.ErrRateLimited, e), after)
	case e.Type == "exceed_context_size_error" || e.Code == "context_length_exceeded" || contextLength(e.Message):
		// Whatever the status: llama.cpp's server sends a 400 or (older
		// versions) a 500, and a proxy may pass any. Not the server's
		// failure: another attempt would fail alike.
		return fmt.Errorf("openai: %w: %w", agent.ErrContextLength, e)
	case e.StatusCode >= 500 || e.StatusCode == http.StatusRequestTimeout || e.StatusCode == http.StatusConflict:
		// 409: a conflict on the server's side (a lock), which the SDK
		// too would retry.
		return retry.Retryable(fmt.Errorf("openai: %w: %w", agent.ErrUnavailable, e), after)
	default:
		return fmt.Errorf("openai: %w: %w", agent.ErrRequest, e)
	}
}

// What an error event says of its failure (eventFault).
const (
	faultServer  = iota // the server's failure, or nothing said
	faultRequest        // the request's fault: a bad request, key, model
	faultQuota          // out of credit (insufficient_quota)
	faultRate           // a rate limit
)

// requestFaults are the error types and codes, lower-cased, that say the
// request is at fault: OpenAI's and llama.cpp's types and codes, and the
// exception names vLLM sends as the type.
var requestFaults = map[string]bool{
	"invalid_request_error": true, "authentication_error": true, "permission_error": true,
	"not_found_error": true, "not_supported_error": true, "invalid_api_key": true, "model_not_found": true,
	"badrequesterror": true, "authenticationerror": true, "permissiondeniederror": true,
	"notfounderror": true, "unprocessableentityerror": true,
}

// eventFault reads what an error event in the stream says of its failure:
// its error's code when that is an HTTP status (vLLM, llama.cpp and
// OpenRouter send one), else its type and code. Data that says nothing
// known is faultServer, as a failure after the headers mostly is.
func eventFault(data []byte) int {
	var ev struct {
		Error struct {
			Type string          `json:"type"`
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return faultServer // an error that is a string, or not JSON
	}
	typ := strings.ToLower(ev.Error.Type)
	code := strings.ToLower(strings.Trim(string(ev.Error.Code), `"`))
	status, _ := strconv.Atoi(code)
	switch {
	case outOfCredit(typ, code):
		return faultQuota
	case status == http.StatusTooManyRequests || typ == "rate_limit_error" || typ == "ratelimiterror" || code == "rate_limit_exceeded":
		return faultRate
	case status >= 500 || status == http.StatusRequestTimeout || status == http.StatusConflict:
		return faultServer
	case status >= 400 || requestFaults[typ] || requestFaults[code]:
		return faultRequest
	}
	return faultServer
}

// outOfCredit reports whether an error's type or code, in any case, is
// insufficient_quota: OpenAI sends it as the one or the other, or both.
func outOfCredit(typ, code string) bool {
	return strings.EqualFold(typ, "insufficient_quota") || strings.EqualFold(code, "insufficient_quota")
}

// contextLength reports whether an error text says the context is too long:
// OpenAI's code, or the wording of the compatible servers that send none
// (vLLM: "maximum context length"; llama.cpp: "exceeds the available
// context size").
func contextLength(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "context_length_exceeded") || strings.Contains(s, "maximum context length") ||
		(strings.Contains(s, "context length") || strings.Contains(s, "context size")) && strings.Contains(s, "exceed")
}
