package agent

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
)

// Limits of Settings, checked by ValidateSettings.
const (
	// MaxSystemPromptBytes bounds Settings.SystemPrompt.
	MaxSystemPromptBytes = 32 << 10
	// MaxModelNameBytes bounds Settings.Model.
	MaxModelNameBytes = 256
)

// Tool choices of Settings.ToolChoice besides a tool's name.
const (
	// ToolChoiceAuto lets the model decide whether to call tools.
	ToolChoiceAuto = "auto"
	// ToolChoiceNone forbids tool calls.
	ToolChoiceNone = "none"
	// ToolChoiceRequired makes the model call at least one tool.
	ToolChoiceRequired = "required"
)

// Settings are the model settings of a conversation: what a Model sends
// with each call besides the context. The zero value of each field means
// "not set": the runtime's default (lazarus.Options.Settings) if it sets
// one, else the Model's own configuration.
type Settings struct {
	// SystemPrompt is sent as the system prompt, before the context.
	SystemPrompt string
	// Model names the provider's model for this conversation ("gpt-4o",
	// "llama3.1:8b"), overriding the Model's configured one.
	Model string
	// Temperature is the sampling temperature (>= 0). Nil: not set.
	Temperature *float64
	// MaxTokens bounds the tokens of one answer (> 0). 0: not set.
	MaxTokens int64
	// ToolChoice is ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired or
	// the name of one tool the model must call. "": not set.
	ToolChoice string
}

// Keys of Settings in a conversation row's settings map (Conversation.settings).
const (
	settingSystemPrompt = "system_prompt"
	settingModel        = "model"
	settingTemperature  = "temperature"
	settingMaxTokens    = "max_tokens"
	settingToolChoice   = "tool_choice"
)

// IsZero reports whether no field is set.
func (s Settings) IsZero() bool {
	return s.SystemPrompt == "" && s.Model == "" && s.Temperature == nil && s.MaxTokens == 0 && s.ToolChoice == ""
}

// Over returns s with every field it does not set taken from base.
func (s Settings) Over(base Settings) Settings {
	if s.SystemPrompt == "" {
		s.SystemPrompt = base.SystemPrompt
	}
	if s.Model == "" {
		s.Model = base.Model
	}
	if s.Temperature == nil {
		s.Temperature = base.Temperature
	}
	if s.MaxTokens == 0 {
		s.MaxTokens = base.MaxTokens
	}
	if s.ToolChoice == "" {
		s.ToolChoice = base.ToolChoice
	}
	return s
}

// ValidateSettings checks s: valid UTF-8; a system prompt of at most
// MaxSystemPromptBytes and a model name of at most MaxModelNameBytes; a
// finite temperature >= 0; MaxTokens >= 0; a tool choice that is one of the
// ToolChoice constants or, when tools is not nil, the name of one of its
// tools. Errors wrap journal.ErrInvalid.
func ValidateSettings(s Settings, tools *Registry) error {
	switch {
	case len(s.SystemPrompt) > MaxSystemPromptBytes:
		return journal.Invalidf("system prompt of %d bytes exceeds %d", len(s.SystemPrompt), MaxSystemPromptBytes)
	case !utf8.ValidString(s.SystemPrompt):
		return journal.Invalidf("system prompt is not valid UTF-8")
	case len(s.Model) > MaxModelNameBytes:
		return journal.Invalidf("model name of %d bytes exceeds %d", len(s.Model), MaxModelNameBytes)
	case !utf8.ValidString(s.Model):
		return journal.Invalidf("model name is not valid UTF-8")
	case s.Temperature != nil && (math.IsNaN(*s.Temperature) || math.IsInf(*s.Temperature, 0) || *s.Temperature < 0):
		return journal.Invalidf("temperature %v is not a finite number >= 0", *s.Temperature)
	case s.MaxTokens < 0:
		return journal.Invalidf("negative max tokens %d", s.MaxTokens)
	}
	switch s.ToolChoice {
	case "", ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
		return nil
	}
	if tools == nil {
		if err := checkName(s.ToolChoice); err != nil {
			return journal.Invalidf("tool choice %q is neither auto, none, required nor a tool name", clip(s.ToolChoice, MaxNameBytes))
		}
		return nil
	}
	if _, ok := tools.Lookup(s.ToolChoice); !ok {
		return journal.Invalidf("tool choice %q is neither auto, none, required nor a registered tool", clip(s.ToolChoice, MaxNameBytes))
	}
	return nil
}

// Map returns s as a conversation row's settings map: every key of
// Settings, with "" for a field not set (which removes the key when merged
// into a row), so that merging the map replaces the row's settings.
func (s Settings) Map() map[string]string {
	m := map[string]string{
		settingSystemPrompt: s.SystemPrompt,
		settingModel:        s.Model,
		settingTemperature:  "",
		settingMaxTokens:    "",
		settingToolChoice:   s.ToolChoice,
	}
	if s.Temperature != nil {
		m[settingTemperature] = strconv.FormatFloat(*s.Temperature, 'g', -1, 64)
	}
	if s.MaxTokens != 0 {
		m[settingMaxTokens] = strconv.FormatInt(s.MaxTokens, 10)
	}
	return m
}

// SettingsOf reads Settings from a conversation row's settings map. Keys it
// does not know are ignored; a value that does not parse (a store written
// by hand) leaves its field unset.
func SettingsOf(m map[string]string) Settings {
	s := Settings{
		SystemPrompt: m[settingSystemPrompt],
		Model:        m[settingModel],
		ToolChoice:   m[settingToolChoice],
	}
	if v, ok := m[settingTemperature]; ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0 {
			s.Temperature = &f
		}
	}
	if v, ok := m[settingMaxTokens]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			s.MaxTokens = n
		}
	}
	return s
}
