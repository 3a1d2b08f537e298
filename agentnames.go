package lazarus

import "slices"

// HasAgent reports whether name is a named agent of the Runtime
// (Options.Agents). The default agent has no name: HasAgent("") is false.
func (r *Runtime) HasAgent(name string) bool {
	return name != "" && slices.ContainsFunc(r.opts.Agents, func(a Agent) bool { return a.Name == name })
}

// agentNames returns the names of the named agents (Options.Agents), nil
// without them.
func (r *Runtime) agentNames() []string {
	var names []string
	for _, a := range r.opts.Agents {
		names = append(names, a.Name)
	}
	return names
}
