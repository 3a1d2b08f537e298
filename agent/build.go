package agent

import "github.com/lazarusrt/lazarus/messages"

// Constructors of messages, so that a Model, a test or an application
// builds them without protobuf boilerplate.

// TextPart returns a content part holding text.
func TextPart(text string) *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_Text{Text: text}}
}

// ImagePart returns a content part holding an image: its bytes, or, when
// data is nil, a reference to uri.
func ImagePart(mediaType string, data []byte, uri string) *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: mediaType, Data: data, Uri: uri}}}
}

// FilePart returns a content part holding a named file: its bytes, or,
// when data is nil, a reference to uri.
func FilePart(name, mediaType string, data []byte, uri string) *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_File{File: &messages.Blob{Name: name, MediaType: mediaType, Data: data, Uri: uri}}}
}

// UserMessage returns a user message of the given parts, in order (see
// lazarus.Runtime.SendMessage).
func UserMessage(parts ...*messages.ContentPart) *messages.UserMessage {
	return &messages.UserMessage{Content: parts}
}

// Text returns an assistant message holding text and no tool call: a
// model's final answer.
func Text(text string) *messages.AssistantMessage { return Reply(text) }

// Reply returns an assistant message with text (no text part if text is
// empty) and the given tool calls, in order.
func Reply(text string, calls ...*messages.ToolCall) *messages.AssistantMessage {
	msg := &messages.AssistantMessage{ToolCalls: calls}
	if text != "" {
		msg.Content = []*messages.ContentPart{TextPart(text)}
	}
	return msg
}

// Call returns a call of the named tool with JSON arguments. Its Id may
// stay empty: the runtime mints tool call ids (a provider's own id goes in
// ProviderId).
func Call(name, arguments string) *messages.ToolCall {
	return &messages.ToolCall{Name: name, Arguments: arguments}
}
