// Package anthropic is an agent.Model on Anthropic's Messages API, streaming,
// built on the official SDK (github.com/anthropics/anthropic-sdk-go).
//
// # Streaming and tool calls
//
// Text deltas (text_delta) reach onDelta as the events arrive, and the
// answer's text is their concatenation in that order. A tool_use
// block is assembled from its input_json_delta fragments (a block that has
// none takes the input its content_block_start gave, else {}); several tool_use
// blocks in one answer become several calls, in block order, with an empty
// Id (the runtime mints one) and the provider's id (toolu_...) in
// ProviderId. In the history sent back, a call (tool_use) and its result
// (tool_result, in the next user message) carry the runtime's id; a
// message sent while the call was open, which the log holds before the
// result, follows the results in that user message
// (openai.ResultsAfterCalls). A message's text, a system prompt or a
// summary that is empty or only whitespace is left out of the request:
// the API refuses such a text block. The request's first message is a
// user message: when the context starts with the assistant's (after a
// summary that ended at a user message or a tool result), a short user
// message goes before it, openai.LeadAfterSummary or
// openai.LeadWithoutSummary, which Bedrock and some proxies require (the
// openai provider sends the same). Usage is read from message_start (input) and message_delta (output, cumulative;
// an input count there replaces message_start's if positive) and recorded
// on the assistant message with the model's name: input_tokens,
// cache_read_input_tokens and cache_creation_input_tokens as the API
// reports them (input_tokens excludes the two cache counts: the prompt is
// their sum), a count not reported as 0; a negative count, which no server
// means, is recorded as 0. Blocks of
// other kinds (thinking, a server tool's use and its result, which a
// request made with RequestOptions may get) are not streamed and not kept.
//
// # Failures
//
// Errors wrap the provider-neutral sentinels of package agent (errors.Is),
// and the SDK's *anthropic.Error when the server answered with an error
// (errors.As). A 429 (after its retry-after-ms, else its Retry-After), a 408, a 409, a 5xx or 529 (overloaded), an
// error event (overloaded_error, api_error, rate_limit_error, a type not
// known) and a connection that failed before any text was streamed are
// retried under Options.Retry; the SDK's own retries are off. Any other 4xx,
// and an error event of a request's type (invalid_request_error,
// authentication_error, permission_error, not_found_error,
// request_too_large, billing_error), before text or after it, fails with
// agent.ErrRequest: another attempt would fail alike. Once text was
// streamed, a failure is never retried here: the call fails with
// agent.ErrInterrupted (the runtime's own policy, lazarus.Options.ModelRetry,
// may call Generate again). A stop_reason "refusal" fails the turn with
// agent.ErrRefused; "model_context_window_exceeded", and an error saying
// "prompt is too long" or that the input and max_tokens "exceed context
// limit" (whatever its status or type, a 5xx or an api_error event
// included: never retried), with agent.ErrContextLength. A stop_reason "max_tokens" is not a
// failure: the answer is what the model wrote up to the bound, and a
// tool_use cut there keeps its input as far as it came (not JSON: the
// runtime records the call with an invalid error result the model reads
// next). The answer ends at message_stop, the stream's last event,
// whether or not the connection closes after it. A stream that ends with
// no stop_reason is agent.ErrIncomplete, and one whose text, model name
// or a call's id is not valid UTF-8 is agent.ErrMalformed (see
// openai.NotUTF8).
//
// # Environment
//
// New reads nothing from the environment; OptionsFromEnv does:
// ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY and ANTHROPIC_MODEL.
package anthropic

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Environment variables read by OptionsFromEnv.
const (
	EnvBaseURL = "ANTHROPIC_BASE_URL"
	EnvAPIKey  = "ANTHROPIC_API_KEY"
	EnvModel   = "ANTHROPIC_MODEL"
)

// DefaultMaxTokens is Options.MaxTokens when zero: the API requires a bound.
const DefaultMaxTokens = 4096

// Options configure a Model.
type Options struct {
	// Model names the model ("claude-sonnet-4-5"). Required.
	Model string
	// BaseURL is the API's base URL. Empty means the SDK's default.
	BaseURL string
	// APIKey is sent as x-api-key. Empty sends none (a local server that
	// checks none).
	APIKey string
	// System is the system prompt. Empty (or only whitespace) means none.
	System string
	// Temperature, if set, is sent as the sampling temperature. Nil means
	// the server's default.
	Temperature *float64
	// MaxTokens bounds the tokens of an answer. 0 means DefaultMaxTokens.
	MaxTokens int64
	// Retry bounds the retries of a call (429, 408, 409, 5xx, 529, a
	// failure before any text). The zero value is retry's defaults.
	Retry retry.Policy
	// HTTPClient sends the requests. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// RequestOptions are passed to the SDK after the ones above.
	RequestOptions []option.RequestOption
}

// OptionsFromEnv returns Options with BaseURL, APIKey and Model read from
// ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY and ANTHROPIC_MODEL.
func OptionsFromEnv() Options {
	return Options{BaseURL: os.Getenv(EnvBaseURL), APIKey: os.Getenv(EnvAPIKey), Model: os.Getenv(EnvModel)}
}

// Model is an agent.Model on the Messages API. Safe for concurrent use.
type Model struct {
	opts    Options
	client  sdk.Client
	schemas sync.Map // Parameters text -> sdk.ToolInputSchemaParam
}

var _ agent.Model = (*Model)(nil)

// New returns a Model. It fails with an error wrapping journal.ErrInvalid
// when Options.Model is empty. It makes no request, and reads nothing from
// the environment or the disk: the SDK's client is built without its
// defaults, which would take ANTHROPIC_BASE_URL (where the key would go),
// ANTHROPIC_AUTH_TOKEN, a profile file or federated credentials, and refuse
// a request without a key.
func New(opts Options) (*Model, error) {
	if opts.Model == "" {
		return nil, journal.Invalidf("anthropic: no model name (Options.Model, or %s)", EnvModel)
	}
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = DefaultMaxTokens
	}
	ro := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(0)}
	if opts.APIKey != "" {
		ro = append(ro, option.WithAPIKey(opts.APIKey))
	}
	if opts.BaseURL != "" {
		ro = append(ro, option.WithBaseURL(opts.BaseURL))
	}
	if opts.HTTPClient != nil {
		ro = append(ro, option.WithHTTPClient(opts.HTTPClient))
	}
	ro = append(ro, opts.RequestOptions...)
	return &Model{opts: opts, client: sdk.NewClient(ro...)}, nil
}

// Generate implements agent.Model: one streamed Messages call, retried under
// Options.Retry while nothing has been streamed.
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

// request renders a turn as the call's parameters. Consecutive events of
// one role become one message (tool results go in a user message).
func (m *Model) request(turn agent.Turn) (sdk.MessageNewParams, error) {
	// The conversation's settings, over the Model's own.
	set := turn.Settings.Over(agent.Settings{SystemPrompt: m.opts.System, Model: m.opts.Model, Temperature: m.opts.Temperature, MaxTokens: m.opts.MaxTokens})
	p := sdk.MessageNewParams{Model: sdk.Model(set.Model), MaxTokens: set.MaxTokens}
	if set.Temperature != nil {
		p.Temperature = sdk.Float(*set.Temperature)
	}
	switch choice := set.ToolChoice; {
	case choice == "" || len(turn.Tools) == 0:
		// No tools: the API refuses a tool_choice without them (400).
	case choice == agent.ToolChoiceAuto:
		p.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{}}
	case choice == agent.ToolChoiceNone:
		none := sdk.NewToolChoiceNoneParam()
		p.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &none}
	case choice == agent.ToolChoiceRequired:
		p.ToolChoice = sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{}}
	default:
		p.ToolChoice = sdk.ToolChoiceParamOfTool(set.ToolChoice)
	}
	// The API refuses a system text block that is empty or only
	// whitespace (400), as it does one in a message: such a prompt or
	// summary is left out.
	if strings.TrimSpace(set.SystemPrompt) != "" {
		p.System = append(p.System, sdk.TextBlockParam{Text: set.SystemPrompt})
	}
	if s := turn.Summary.GetContent(); strings.TrimSpace(s) != "" {
		p.System = append(p.System, sdk.TextBlockParam{Text: openai.SummaryPrefix + s})
	}
	add := func(role sdk.MessageParamRole, blocks ...sdk.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == role {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, blocks...)
			return
		}
		p.Messages = append(p.Messages, sdk.MessageParam{Role: role, Content: blocks})
	}
	for _, ev := range openai.ResultsAfterCalls(turn.Context) {
		switch {
		case ev.GetUserMsg() != nil:
			// The API refuses a text block that is empty or only
			// whitespace (400), on every later call once the log holds
			// one: such text is left out.
			if t := openai.Text(ev.GetUserMsg().GetContent()); strings.TrimSpace(t) != "" {
				add(sdk.MessageParamRoleUser, sdk.NewTextBlock(t))
			}
		case ev.GetAssistantMsg() != nil:
			a := ev.GetAssistantMsg()
			var blocks []sdk.ContentBlockParamUnion
			if t := openai.Text(a.GetContent()); strings.TrimSpace(t) != "" {
				blocks = append(blocks, sdk.NewTextBlock(t))
			}
			for _, tc := range a.GetToolCalls() {
				args := tc.GetArguments()
				if !agent.ValidJSON(args) || !strings.HasPrefix(strings.TrimLeft(args, " \t\r\n"), "{") {
					// A tool_use input must be an object: a call whose
					// arguments were not (recorded with an error result
					// the model reads next) is sent with none.
					args = "{}"
				}
				blocks = append(blocks, sdk.NewToolUseBlock(openai.CallID(tc), json.RawMessage(args), tc.GetName()))
			}
			add(sdk.MessageParamRoleAssistant, blocks...)
		case ev.GetToolResult() != nil:
			tr := ev.GetToolResult()
			o := tr.GetOutcome()
			add(sdk.MessageParamRoleUser, sdk.NewToolResultBlock(tr.GetToolCallId(), openai.ResultText(o), o.GetError() != nil))
		}
	}
	// The API (Bedrock, some proxies) refuses a first message not in the
	// user role (400), which a context starting after a summary with the
	// assistant's reply would send on every turn: a short user message
	// goes first. The assistant message after it keeps its tool_use
	// blocks, and their results still follow in the next user message.
	if len(p.Messages) > 0 && p.Messages[0].Role != sdk.MessageParamRoleUser {
		lead := openai.LeadWithoutSummary
		if strings.TrimSpace(turn.Summary.GetContent()) != "" {
			lead = openai.LeadAfterSummary
		}
		p.Messages = append([]sdk.MessageParam{{Role: sdk.MessageParamRoleUser, Content: []sdk.ContentBlockParamUnion{sdk.NewTextBlock(lead)}}}, p.Messages...)
	}
	for _, spec := range turn.Tools {
		schema, err := m.schema(spec)
		if err != nil {
			return p, err
		}
		tp := &sdk.ToolParam{Name: spec.Name, InputSchema: schema}
		if spec.Description != "" {
			tp.Description = sdk.String(spec.Description)
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tp})
	}
	return p, nil
}

// schema decodes a tool's JSON schema once per distinct text.
func (m *Model) schema(spec agent.ToolSpec) (sdk.ToolInputSchemaParam, error) {
	if spec.Parameters == "" {
		return sdk.ToolInputSchemaParam{Properties: map[string]any{}}, nil
	}
	if v, ok := m.schemas.Load(spec.Parameters); ok {
		return v.(sdk.ToolInputSchemaParam), nil
	}
	var raw map[string]any
	err := json.Unmarshal([]byte(spec.Parameters), &raw)
	if err == nil && raw == nil {
		err = errors.New("null is not a JSON object") // it decodes as a nil map
	}
	if err != nil {
		// The request cannot be made: agent.ErrRequest, the one sentinel
		// a provider's error wraps, beside journal.ErrInvalid.
		return sdk.ToolInputSchemaParam{}, fmt.Errorf("%w: %w", agent.ErrRequest, journal.Invalidf("anthropic: parameters of tool %s: %v", spec.Name, err))
	}
	s := sdk.ToolInputSchemaParam{Properties: raw["properties"], ExtraFields: map[string]any{}}
	if req, ok := raw["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				s.Required = append(s.Required, name)
			}
		}
	}
	for k, v := range raw {
		if k != "properties" && k != "required" && k != "type" {
			s.ExtraFields[k] = v
		}
	}
	if s.Properties == nil {
		s.Properties = map[string]any{}
	}
	m.schemas.Store(spec.Parameters, s)
	return s, nil
}

// block is a content block being assembled.
type block struct {
	kind string // "text", "tool_use", or another (ignored)
	id   string
	name string
	// input is a tool_use block's input, as its input_json_delta
	// fragments came. (A text block's text goes straight into the
	// answer's, in the order its deltas came, which is what onDelta saw.)
	input strings.Builder
	// start is a tool_use block's input as content_block_start gave it,
	// the arguments when no input_json_delta follows.
	start string
}

// attempt makes one streamed call.
func (m *Model) attempt(ctx context.Context, params sdk.MessageNewParams, onDelta func(string)) (*messages.AssistantMessage, error) {
	stream := m.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var (
		text     strings.Builder // the answer's text, as its deltas came
		blocks   = map[int64]*block{}
		order    []*block
		stop     string
		model    string
		usage    messages.Usage
		seenUse  bool
		streamed bool
		ended    bool // message_stop: the stream's last event
	)
	for !ended && stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "":
			// Data that is JSON but not an event (an array, an object
			// without a type) does not decode as one.
			return nil, fmt.Errorf("anthropic: %w: an event without a type", agent.ErrMalformed)
		case "message_start":
			model = ev.Message.Model
			// A negative count, which no server means, is recorded as 0.
			usage.InputTokens = max(ev.Message.Usage.InputTokens, 0)
			usage.OutputTokens = max(ev.Message.Usage.OutputTokens, 0)
			usage.CacheReadInputTokens = max(ev.Message.Usage.CacheReadInputTokens, 0)
			usage.CacheCreationInputTokens = max(ev.Message.Usage.CacheCreationInputTokens, 0)
			seenUse = true
		case "content_block_start":
			b := &block{kind: ev.ContentBlock.Type, id: ev.ContentBlock.ID, name: ev.ContentBlock.Name}
			blocks[ev.Index] = b
			order = append(order, b)
			if b.kind == "tool_use" {
				b.start = strings.TrimSpace(ev.ContentBlock.JSON.Input.Raw())
			}
			if b.kind == "text" && ev.ContentBlock.Text != "" {
				text.WriteString(ev.ContentBlock.Text)
				if onDelta != nil {
					onDelta(ev.ContentBlock.Text)
				}
				streamed = true
			}
		case "content_block_delta":
			b := blocks[ev.Index]
			if b == nil {
				return nil, fmt.Errorf("anthropic: %w: delta of block %d, which never started", agent.ErrMalformed, ev.Index)
			}
			if ev.Delta.Type == "text_delta" && b.kind != "text" || ev.Delta.Type == "input_json_delta" && b.kind == "text" {
				// Text into a tool's input, or input into the text: the
				// deltas would no longer be the message's text. (Input
				// into another kind of block, a server tool's use, is
				// not kept, as that block is not.)
				return nil, fmt.Errorf("anthropic: %w: %s in block %d, a %s block", agent.ErrMalformed, ev.Delta.Type, ev.Index, b.kind)
			}
			switch ev.Delta.Type {
			case "text_delta":
				if ev.Delta.Text == "" {
					break // no text: a failure after it may still be retried
				}
				text.WriteString(ev.Delta.Text)
				if onDelta != nil {
					onDelta(ev.Delta.Text)
				}
				streamed = true
			case "input_json_delta":
				b.input.WriteString(ev.Delta.PartialJSON)
			}
		case "message_stop":
			// Nothing follows it: a server or proxy that keeps the
			// connection open after it must not hold the call.
			ended = true
		case "message_delta":
			if ev.Delta.StopReason != "" {
				stop = string(ev.Delta.StopReason)
			}
			if ev.Usage.JSON.OutputTokens.Valid() {
				usage.OutputTokens = max(ev.Usage.OutputTokens, 0)
				seenUse = true
			}
			// The input counts came with message_start; a later count,
			// cumulative, replaces one only if positive.
			if ev.Usage.JSON.InputTokens.Valid() && ev.Usage.InputTokens > 0 {
				usage.InputTokens = ev.Usage.InputTokens
			}
			if ev.Usage.JSON.CacheReadInputTokens.Valid() && ev.Usage.CacheReadInputTokens > 0 {
				usage.CacheReadInputTokens = ev.Usage.CacheReadInputTokens
			}
			if ev.Usage.JSON.CacheCreationInputTokens.Valid() && ev.Usage.CacheCreationInputTokens > 0 {
				usage.CacheCreationInputTokens = ev.Usage.CacheCreationInputTokens
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, classify(ctx, err, streamed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	msg := &messages.AssistantMessage{Model: model}
	if model == "" {
		msg.Model = string(params.Model) // the model asked for: the conversation's, else the options'
	}
	if seenUse {
		msg.Usage = &usage
	}
	for _, b := range order {
		if b.kind == "tool_use" {
			args := b.input.String()
			if strings.TrimSpace(args) == "" {
				args = b.start
			}
			if args == "" || args == "null" {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, &messages.ToolCall{Name: b.name, Arguments: args, ProviderId: b.id})
		}
	}
	switch stop {
	case "":
		return nil, fmt.Errorf("anthropic: %w", agent.ErrIncomplete)
	case string(sdk.StopReasonRefusal):
		return nil, fmt.Errorf("anthropic: %w: %s", agent.ErrRefused, text.String())
	case string(sdk.StopReasonModelContextWindowExceeded):
		return nil, fmt.Errorf("anthropic: %w: stop reason %s", agent.ErrContextLength, stop)
	}
	if text.Len() > 0 {
		msg.Content = []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text.String()}}}
	}
	if what := openai.NotUTF8(msg); what != "" {
		return nil, fmt.Errorf("anthropic: %w: %s is not valid UTF-8", agent.ErrMalformed, what)
	}
	return msg, nil
}

// classify maps a failed call onto the sentinels of package agent, marking
// what may be retried.
func classify(ctx context.Context, err error, streamed bool) error {
	if ctx.Err() != nil {
		return fmt.Errorf("anthropic: %w", ctx.Err())
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		return classifyAPI(apiErr, streamed)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, bufio.ErrTooLong) {
		// A line longer than the SDK's decoder reads (32 MiB) is a chunk
		// that cannot be decoded, not a rejected request.
		return fmt.Errorf("anthropic: %w: %w", agent.ErrMalformed, err)
	}
	switch {
	case streamed:
		return fmt.Errorf("anthropic: %w: %w", agent.ErrInterrupted, err)
	case retry.Transient(err):
		return retry.Retryable(fmt.Errorf("anthropic: %w: %w", agent.ErrUnavailable, err), 0)
	default:
		return fmt.Errorf("anthropic: %w: %w", agent.ErrRequest, err)
	}
}

// classifyAPI maps an error status, or an error event in the stream (its
// status is the stream's, 200), by status and then by error type.
func classifyAPI(e *sdk.Error, streamed bool) error {
	var after time.Duration
	if e.Response != nil && e.StatusCode != http.StatusOK {
		after = retry.After(e.Response.Header, time.Now())
	}
	typ := string(e.Type())
	raw := strings.ToLower(e.RawJSON())
	// The API's wordings: "prompt is too long: N tokens > M maximum", and
	// "input length and `max_tokens` exceed context limit: N + K > M" (the
	// input fits but not with the answer's bound).
	tooLong := strings.Contains(raw, "prompt is too long") || strings.Contains(raw, "context window") || strings.Contains(raw, "exceed context limit")
	switch {
	case e.StatusCode == http.StatusOK && !tooLong && typ != "rate_limit_error" && !requestType(typ):
		// An error event of any other type (overloaded_error, api_error,
		// one unknown): the stream broke, after text or before it (then
		// the server's failure, retried).
		if streamed {
			return fmt.Errorf("anthropic: %w: %w", agent.ErrInterrupted, e)
		}
		return retry.Retryable(fmt.Errorf("anthropic: %w: %w", agent.ErrUnavailable, e), 0)
	case e.StatusCode == http.StatusTooManyRequests || typ == "rate_limit_error":
		if streamed {
			return fmt.Errorf("anthropic: %w: %w", agent.ErrInterrupted, e)
		}
		return retry.Retryable(fmt.Errorf("anthropic: %w: %w", agent.ErrRateLimited, e), after)
	case tooLong:
		// Whatever the status or the error's type (a 5xx, an api_error
		// event): another attempt would fail alike.
		return fmt.Errorf("anthropic: %w: %w", agent.ErrContextLength, e)
	case e.StatusCode >= 500 || e.StatusCode == http.StatusRequestTimeout || e.StatusCode == http.StatusConflict || typ == "overloaded_error" || typ == "api_error":
		if streamed {
			return fmt.Errorf("anthropic: %w: %w", agent.ErrInterrupted, e)
		}
		return retry.Retryable(fmt.Errorf("anthropic: %w: %w", agent.ErrUnavailable, e), after)
	default:
		// A 4xx, or an error event of a request's type (requestType),
		// after text or before it: another attempt would fail alike.
		return fmt.Errorf("anthropic: %w: %w", agent.ErrRequest, e)
	}
}

// requestType reports whether an error type is the request's fault (its
// 4xx statuses: a bad request, key, permission, model or size, no credit):
// sent as an error event in the stream, it is not retried either.
func requestType(typ string) bool {
	switch typ {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large", "billing_error":
		return true
	}
	return false
}
