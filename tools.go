package lazarus

import "github.com/lazarusrt/lazarus/agent"

// Tool returns the tool registered under name and true, or false if there
// is none: one of Options.Tools, or a built-in tool the options add (the
// handoff tool, HandoffToolName, with Options.Agents; the schedule tools,
// ScheduleToolName and its siblings, with Options.ScheduleTools). A human tool has its defaults filled in (see
// agent.Registry.Lookup). An application serving the Runtime uses it to
// apply a tool's rules (agent.Tool.Authorize) before it shows a pending
// call to someone; Resolve and Reject apply them again.
func (r *Runtime) Tool(name string) (agent.Tool, bool) { return r.tools.Lookup(name) }
